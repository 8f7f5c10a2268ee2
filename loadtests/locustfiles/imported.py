"""Imported-model scenario: one row of an import's samples per request, to any model you imported.

    python scripts/loadtest.py --scenario imported --model filetype --model-repository build/public/repository
    locust -f loadtests/locustfiles/imported.py --headless --host grpc://127.0.0.1:8001 -u 8 -r 8 -t 30s \\
        --model filetype --model-repository build/public/repository

The rows are the ones the import was checked on (`build/imported/<model>/samples.npz`, or
`--samples FILE.npz`), cycled from a per-process offset. The client is the typed SDK, generated
in memory from the repository's config at start-up (the same code `generate_clients.py` writes).
Rows repeat once the file is exhausted: with the response cache on, repeats are cache hits.
"""

import sys
import types
from itertools import count
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for `locust -f`

import numpy as np
from locust import constant, events, task

from loadtests.grpc_user import GrpcUser, TableShape  # noqa: F401
from loadtests.payloads import process_seed
from triton_fastpath.paths import BUILD_DIR, DEFAULT_REPOSITORY

_loaded: dict = {}


@events.init_command_line_parser.add_listener
def _options(parser) -> None:
    group = parser.add_argument_group("imported model")
    group.add_argument("--model", default="", help="the imported model's name (required)")
    group.add_argument("--samples", default="", help="rows to send (default: build/imported/<model>/samples.npz)")
    group.add_argument("--model-repository", default=str(DEFAULT_REPOSITORY), help="where its config.pbtxt is")


def sdk_module(repository: Path, model: str) -> types.ModuleType:
    """The typed SDK module of `model`, rendered from the repository and executed in memory."""
    from clients.codegen import load_labels, load_repository, signature_of
    from clients.codegen_render import render_module

    configs = load_repository(repository)
    if model not in configs:
        raise ValueError(f"--model {model!r}: not in {repository} (models: {', '.join(sorted(configs))})")
    rendered = render_module(signature_of(model, configs, load_labels(repository, configs)), configs[model], model)
    module = types.ModuleType(f"imported_sdk_{rendered.module}")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(rendered.source, f"<sdk of {model}>", "exec"), module.__dict__)
    return module


def load(options) -> tuple[types.ModuleType, dict[str, np.ndarray]]:
    """This process's SDK module and sample rows (loaded once)."""
    if not _loaded:
        if not options.model:
            raise ValueError("--model NAME is required: the imported model to load-test")
        samples = Path(options.samples or BUILD_DIR / "imported" / options.model / "samples.npz")
        if not samples.is_file():
            raise FileNotFoundError(f"{samples}: no samples; import the model first or pass --samples FILE.npz")
        module = sdk_module(Path(options.model_repository), options.model)
        with np.load(samples, allow_pickle=False) as archive:
            rows = {spec.name: archive[spec.name] for spec in module.SIGNATURE.inputs}
        _loaded.update(module=module, rows=rows, next=count(process_seed() % len(next(iter(rows.values())))))
    return _loaded["module"], _loaded["rows"]


class ImportedUser(GrpcUser):
    """Sends one sample row per request to `--model`, back to back (a closed loop)."""

    scenario = "imported"
    wait_time = constant(0)

    def on_start(self) -> None:
        options = self.environment.parsed_options
        module, self.rows = load(options)
        from clients.codegen import class_prefix

        prefix = class_prefix(options.model)
        self.client_class = getattr(module, f"{prefix}Client")
        self.request_class = getattr(module, f"{prefix}Request")
        self.fields = [(spec.name, spec.field) for spec in module.SIGNATURE.inputs]
        self.model = options.model
        super().on_start()
        self.method = getattr(self.client, "classify", None) or self.client.predict

    @task
    def infer(self) -> None:
        i = next(_loaded["next"]) % len(self.rows[self.fields[0][0]])
        request = self.request_class(**{field: self.rows[name][i] for name, field in self.fields})
        self.call(self.model, self.method, [request])
