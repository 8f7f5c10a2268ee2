"""Add your own model to the repository, through the same export/verify/render steps as the demo models.

    python scripts/import_model.py hf PATH --name NAME [--eval-csv FILE] [--max-length 128]
        PATH is a local Hugging Face sequence-classification folder (config.json, weights, and a
        fast tokenizer). Served as the ensemble NAME: NAME_tokenizer -> NAME_encoder -> NAME_postprocess.
        --eval-csv has columns text,label; without it parity is checked on built-in probe texts.
    python scripts/import_model.py onnx FILE --name NAME
        An ONNX graph whose first dimension is the batch; served directly as NAME.
Nothing is downloaded: the folder or file must be local.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from triton_fastpath.build import format_report
from triton_fastpath.errors import FastpathError
from triton_fastpath.importers import import_hf_classifier, import_onnx
from triton_fastpath.paths import DEFAULT_REPOSITORY
from triton_fastpath.render import Target
from triton_fastpath.repository import PRECISIONS, RepoSettings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=["hf", "onnx"], help="a Hugging Face folder or an ONNX file")
    parser.add_argument("path", type=Path, help="the local folder or file")
    parser.add_argument("--name", required=True, help="model name in the repository")
    parser.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY, help="default: %(default)s")
    parser.add_argument("--target", choices=[t.value for t in Target], default="embedded")
    parser.add_argument(
        "--precision",
        choices=sorted(PRECISIONS),
        default=None,
        help="served weights (default: int8 for hf, fp32 for onnx; both are built and verified)",
    )
    parser.add_argument("--max-length", type=int, default=64, help="tokens per text (hf; default %(default)s)")
    parser.add_argument("--eval-csv", type=Path, help="held-out text,label rows (hf)")
    args = parser.parse_args(argv)
    try:
        precision = args.precision or ("int8" if args.kind == "hf" else "fp32")
        settings = RepoSettings(precision=precision, max_length=args.max_length)
        if args.kind == "hf":
            report = import_hf_classifier(
                args.path,
                name=args.name,
                repository=args.repository,
                settings=settings,
                eval_csv=args.eval_csv,
                target=args.target,
            )
        else:
            report = import_onnx(
                args.path, name=args.name, repository=args.repository, target=args.target, precision=precision
            )
    except FastpathError as error:
        print(f"import failed: {error}", file=sys.stderr)
        return 1
    print(format_report([report]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
