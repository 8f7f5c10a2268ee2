"""Generate the typed client SDKs (`clients/generated/`) from the model repository's configs.

Reads every `<repository>/*/config.pbtxt` (ensembles included) and writes one module per
top-level model: typed request/response dataclasses, a sync and an asyncio client. Models that
are only steps of an ensemble are skipped unless `--all` is given. Files that no longer
correspond to a model are removed. Run it (`make generate-clients`) after a model's inputs or
outputs change, and commit the result; a unit test fails while the committed files are stale.

    python scripts/generate_clients.py                 # model_repository/ -> clients/generated/
    python scripts/generate_clients.py --check         # exit 1 if clients/generated/ is stale
    python scripts/generate_clients.py --all --output /tmp/sdk
"""

from __future__ import annotations

import argparse
import difflib
import logging
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from clients.codegen import load_labels, load_repository, plan_models  # noqa: E402
from clients.codegen_render import render_package  # noqa: E402

LOGGER = logging.getLogger("generate_clients")


def stale_files(output: Path, files: dict[str, str]) -> dict[str, str]:
    """Files of `output` that differ from `files` (or are missing, or are extra), each with a diff."""
    problems = {}
    for name, text in sorted(files.items()):
        path = output / name
        current = path.read_text() if path.is_file() else ""
        if current != text:
            diff = difflib.unified_diff(
                current.splitlines(keepends=True), text.splitlines(keepends=True), f"a/{name}", f"b/{name}"
            )
            problems[name] = "".join(diff) or f"{name}: missing\n"
    for path in sorted(output.glob("*.py")):
        if path.name not in files:
            problems[path.name] = f"{path.name}: no longer generated (its model is gone or skipped)\n"
    return problems


def write_files(output: Path, files: dict[str, str]) -> list[str]:
    """Write `files` into `output` (only those that changed); remove generated modules no longer wanted.

    Returns:
        The names of the files written or removed.
    """
    output.mkdir(parents=True, exist_ok=True)
    changed = []
    for name, text in sorted(files.items()):
        path = output / name
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
            changed.append(name)
    for path in sorted(output.glob("*.py")):
        if path.name not in files:
            path.unlink()
            changed.append(path.name)
    return changed


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--repository", type=Path, default=ROOT / "model_repository", help="model repository (default: %(default)s)"
    )
    parser.add_argument(
        "--output", type=Path, default=ROOT / "clients" / "generated", help="output package (default: %(default)s)"
    )
    parser.add_argument("--all", action="store_true", help="also generate clients for the steps of ensembles")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 and show a diff if stale")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    configs = load_repository(args.repository)
    plan = plan_models(configs, include_steps=args.all)
    files = render_package(plan, configs, source=args.repository.name, labels=load_labels(args.repository, configs))
    for name, reason in sorted(plan.skipped.items()):
        LOGGER.info("skipped %s: %s", name, reason)
    if args.check:
        problems = stale_files(args.output, files)
        for text in problems.values():
            sys.stdout.write(text)
        if problems:
            LOGGER.error("%s is stale: run `make generate-clients` and commit the result", args.output)
            return 1
        LOGGER.info("%s is up to date (%s)", args.output, ", ".join(plan.selected))
        return 0
    changed = write_files(args.output, files)
    LOGGER.info(
        "generated %s in %s (%s)",
        ", ".join(plan.selected),
        args.output,
        f"changed: {', '.join(changed)}" if changed else "unchanged",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
