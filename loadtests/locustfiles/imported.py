"""Imported-model scenario: one row of an import's samples per request, to any model you imported.

    fastpath loadtest run --scenario imported --model filetype --model-repository build/public/repository
    locust -f loadtests/locustfiles/imported.py --headless --host grpc://127.0.0.1:8001 -u 8 -r 8 -t 30s \\
        --model filetype

The rows are the ones the import was checked on (`build/imported/<model>/samples.npz`, or
`--samples FILE.npz`), cycled from a per-process offset. The client is the SDK's runtime
(`fastpath_client.runtime.ModelClient`: deadlines, retries, error mapping) with the model's signature
read from the live server's config, so no repository files are needed.
Rows repeat once the file is exhausted: with the response cache on, repeats are cache hits.
"""

import dataclasses
import keyword
import re
import sys
from itertools import count
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for `locust -f`

import numpy as np
from locust import constant, events, task

from loadtests.grpc_user import GrpcUser, TableShape, grpc_target  # noqa: F401
from triton_fastpath.load.streams import process_seed
from triton_fastpath.paths import BUILD_DIR

_loaded: dict = {}


@events.init_command_line_parser.add_listener
def _options(parser) -> None:
    group = parser.add_argument_group("imported model")
    group.add_argument("--model", default="", help="the imported model's name (required)")
    group.add_argument("--samples", default="", help="rows to send (default: build/imported/<model>/samples.npz)")


def _field(name: str) -> str:
    field = re.sub(r"\W", "_", name).lower() or "tensor"
    field = f"t_{field}" if field[0].isdigit() else field
    return f"{field}_" if keyword.iskeyword(field) else field


def sdk_classes(url: str, model: str) -> tuple[type, type]:
    """A typed client class of `model` and its request type, from the live server's config.

    The same runtime as the generated SDK (`fastpath_client.runtime.ModelClient`), with the signature read
    over gRPC: no repository files needed, so the locust image can run it too.
    """
    import tritonclient.grpc as grpcclient

    from fastpath_client.runtime import ModelClient
    from fastpath_client.tensors import ModelSignature, TensorField

    with grpcclient.InferenceServerClient(url) as admin:
        config = admin.get_model_config(model, as_json=True)["config"]

    def spec(tensor: dict) -> TensorField:
        datatype = tensor["data_type"].removeprefix("TYPE_").replace("STRING", "BYTES")
        dims = tuple(int(d) for d in tensor.get("dims", []))
        return TensorField(
            tensor["name"], datatype, dims, field=_field(tensor["name"]), optional=bool(tensor.get("optional"))
        )

    signature = ModelSignature(
        model_name=model,
        inputs=tuple(spec(t) for t in config.get("input", [])),
        outputs=tuple(spec(t) for t in config.get("output", [])),
        max_batch_size=int(config.get("max_batch_size", 0)),
        priority_levels=int(config.get("dynamic_batching", {}).get("priority_levels", 0)),
    )
    request = dataclasses.make_dataclass("Request", [(s.field, object) for s in signature.inputs], frozen=True)
    response = dataclasses.make_dataclass(
        "Response", [(s.field, object) for s in signature.outputs], frozen=True, eq=False
    )
    client = type("ImportedClient", (ModelClient,), {"SIGNATURE": signature, "REQUEST": request, "RESPONSE": response})
    return client, request


def load(options, url: str) -> dict:
    """This process's client class, request type and sample rows (loaded once)."""
    if not _loaded:
        if not options.model:
            raise ValueError("--model NAME is required: the imported model to load-test")
        samples = Path(options.samples or BUILD_DIR / "imported" / options.model / "samples.npz")
        if not samples.is_file():
            raise FileNotFoundError(f"{samples}: no samples; import the model first or pass --samples FILE.npz")
        client, request = sdk_classes(url, options.model)
        with np.load(samples, allow_pickle=False) as archive:
            rows = {spec.name: archive[spec.name] for spec in client.SIGNATURE.inputs if spec.name in archive.files}
        n = len(next(iter(rows.values())))
        _loaded.update(client=client, request=request, rows=rows, next=count(process_seed() % n))
    return _loaded


class ImportedUser(GrpcUser):
    """Sends one sample row per request to `--model`, back to back (a closed loop)."""

    scenario = "imported"
    wait_time = constant(0)

    def on_start(self) -> None:
        options = self.environment.parsed_options
        loaded = load(options, grpc_target(self.host))
        self.client_class, self.request_class, self.rows = loaded["client"], loaded["request"], loaded["rows"]
        self.fields = [(spec.name, spec.field) for spec in self.client_class.SIGNATURE.inputs if spec.name in self.rows]
        self.model = options.model
        super().on_start()

    @task
    def infer(self) -> None:
        i = next(_loaded["next"]) % len(self.rows[self.fields[0][0]])
        request = self.request_class(**{field: self.rows[name][i] for name, field in self.fields})
        self.call(self.model, self.client._run, [request], timeout_s=None, priority=0, request_id="")
