"""Add your own model to the repository, through the same export/verify/render steps as the demo models.

    fastpath import hf PATH --name NAME [--eval-csv FILE] [--labels FILE] [--max-length 128] [--trust-pickle]
        PATH is a local Hugging Face folder of one of three kinds, said in the output:
        a transformers sequence classifier (config.json, weights, fast tokenizer); a
        sentence-transformers encoder (modules.json: Transformer + Pooling (+ Normalize); served
        as NAME returning `embedding`); or a SetFit-style classifier (such an encoder plus
        model_head.pkl, or plain model_head.npz / .json coefficients; returns the label). Pooling,
        normalisation and head run inside the served graph. A pickled head is loaded only with
        --trust-pickle (a pickle runs code). --eval-csv has columns text,label (its samples:
        parity, the INT8 gate and accuracy are measured on them; at least 381 texts are needed
        for INT8 to be kept); without it the checks run on a built-in corpus of 1,120 English
        and multilingual texts, and the output says so.
    fastpath import onnx FILE --name NAME [--samples FILE.npz] [--labels FILE]
        An ONNX graph whose first dimension is the batch, served as NAME. --samples is an .npz of
        one array per graph input (rows first) and optionally `labels` (class indices): every
        variant is checked on them, and through a real tritonserver after assembly. Without it the
        checks run on generated rows in --input-range, and the output says so.

    --labels FILE       label names, one a line, in the order of the class scores: the scores output
                        gets Triton's label_filename, and the generated SDK returns the names
    --precision int8    serve INT8, only if it passes its checks (refused with the figures otherwise)

Every check prints its measured figure, its bound and PASS/FAIL; an agreement (INT8 vs FP32, the
served model vs the source) prints n, the rate and its 95% lower bound, which must be >= 99%.
Nothing is downloaded: the folder or file must be local. Example (a public file-type classifier,
see docs/bring-your-own-model.md):

    fastpath import onnx build/public/magika/model.onnx --name filetype \\
        --samples build/public/magika/samples.npz --labels build/public/magika/labels.txt --precision int8
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from triton_fastpath.config.plan import ServingOptions, ServingPlan, plan_serving
from triton_fastpath.config.render import Target
from triton_fastpath.config.rendering import Rendering
from triton_fastpath.config.settings import Precision
from triton_fastpath.errors import FastpathError
from triton_fastpath.imports.checks import parse_range
from triton_fastpath.imports.importer import import_hf, imported_dir
from triton_fastpath.imports.onnx_import import import_onnx
from triton_fastpath.paths import BUILD_DIR, DEFAULT_REPOSITORY
from triton_fastpath.recipes.assemble import with_response_cache_here
from triton_fastpath.recipes.reports import ModelReport, format_report


def parser() -> argparse.ArgumentParser:
    """`fastpath import`'s options."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", choices=["hf", "onnx"], help="a Hugging Face folder or an ONNX file")
    p.add_argument("path", type=Path, help="the local folder or file")
    p.add_argument("--name", required=True, help="model name in the repository")
    p.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY, help="default: %(default)s")
    p.add_argument("--target", choices=[t.value for t in Target], default="embedded")
    p.add_argument(
        "--precision",
        type=Precision,
        choices=list(Precision),
        default=None,
        help="served weights (default: int8 for hf, fp32 for onnx; both are built and checked)",
    )
    p.add_argument("--labels", type=Path, help="label names, one a line, in class-score order")
    p.add_argument(
        "--max-length",
        type=int,
        help="tokens per text (hf classifier; default 64; sentence models: their max_seq_length)",
    )
    p.add_argument(
        "--trust-pickle", action="store_true", help="load a SetFit model_head.pkl with joblib (a pickle runs code)"
    )
    p.add_argument("--eval-csv", type=Path, help="held-out text,label rows (hf)")
    p.add_argument("--samples", type=Path, help="an .npz of named input arrays, optionally `labels` (onnx)")
    p.add_argument("--label-output", help="the class-scores output (onnx; default: the one vector output)")
    p.add_argument(
        "--input-range", help="LOW,HIGH of generated inputs when no --samples (onnx; default 0,1 floats, 0,10 ints)"
    )
    p.add_argument("--no-serve-check", action="store_true", help="skip the check through a real tritonserver (onnx)")
    p.add_argument(
        "--force",
        action="store_true",
        help="make the import's files again even when up to date: an hf classifier's export, INT8 file and text "
        "path, a sentence-transformers/SetFit folder's FP32 export, an ONNX file's INT8 file (by default they are "
        "reused when the folder's or file's bytes and the code are unchanged, by content; the checks always run, "
        "and a sentence model's INT8 trials too)",
    )
    p.add_argument(
        "--work-dir",
        type=Path,
        default=BUILD_DIR,
        help="where the import keeps what it made: <work-dir>/imported/<name>/ (the exported and quantized "
        "files, samples, report.json); nothing else is written but --repository. Default: %(default)s",
    )
    p.add_argument(
        "--rendering",
        type=Rendering,
        choices=list(Rendering),
        default=None,
        help="hf: how the text pipeline is served. Default: the one `fastpath tune` measured fastest with its "
        "caches on (tuning/embedded.json), as `fastpath build` serves the bundled models; 'graph': one ONNX graph "
        "with the tokenizer inside on the native backend, no Python on the path, cached by the response cache "
        "(BERT WordPiece tokenizers; another tokenizer is served 'fused', said so); 'fused': one Python model",
    )
    return p


def serving_plan(args: argparse.Namespace, precision: Precision | str) -> ServingPlan:
    """What `args` ask to serve (`config.plan.plan_serving` decides the rendering and its fallbacks),
    rendered for the response cache that can be served here."""
    options = ServingOptions(rendering=args.rendering, precision=Precision(precision), max_length=args.max_length)
    return plan_serving(options, target=args.target, response_cache_here=with_response_cache_here)


def run_import(args: argparse.Namespace, name: str) -> ModelReport:
    """Import `args.path` as `name` with the rest of `args`' options: the serving plan (its notes
    printed), then `import_hf` or `import_onnx`."""
    precision = args.precision or ("int8" if args.kind == "hf" else "fp32")
    plan = serving_plan(args, precision)
    for line in plan.notes:
        print(line)
    settings = plan.settings  # the tuned backend (native or Python) and response cache
    common = {"repository": args.repository, "target": args.target, "labels": args.labels, "force": args.force}
    if args.kind == "hf":
        return import_hf(
            args.path,
            name,
            out_dir=imported_dir(args.work_dir, name),
            settings=settings,
            eval_csv=args.eval_csv,
            trust_pickle=args.trust_pickle,
            precision=precision,
            **common,
        )
    return import_onnx(
        args.path,
        name,
        settings=settings,
        precision=precision,
        samples=args.samples,
        label_output=args.label_output,
        input_range=parse_range(args.input_range),
        serve_check=not args.no_serve_check,
        work_dir=args.work_dir,
        **common,
    )


def main(argv: list[str] | None = None) -> int:
    """Run `fastpath import hf|onnx`."""
    args = parser().parse_args(argv)
    try:
        report = run_import(args, args.name)
    except FastpathError as error:
        print(f"import failed: {error}", file=sys.stderr)
        return 1
    print(format_report([report]))
    print(f"checked on: {report.data}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
