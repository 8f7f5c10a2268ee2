"""Generate typed client SDKs from a model repository's configs.

Reads every `<repository>/*/config.pbtxt` (ensembles included) and writes one module per top-level
model: typed request/response dataclasses, a sync and an asyncio client. Models that are only steps
of an ensemble are skipped unless `--all` is given.

Two outputs:
- this repository's SDK (`clients/fastpath_models/`, the default): after a model's inputs or outputs change,
  run it and commit the result; a unit test fails while the committed files are stale. Files that
  no longer correspond to a model are removed.
- a standalone distribution for an app team (`--package NAME --version V`): a folder with
  `pyproject.toml` and the package NAME, which carries its own copy of the client runtime and needs
  only `tritonclient[grpc]` and `numpy`; `--wheel DIR` also builds its wheel into DIR.

Examples:
    fastpath clients generate                        # model_repository/ -> clients/fastpath_models/
    fastpath clients generate --check                # exit 1 (with a diff) if clients/fastpath_models/ is stale
    fastpath clients generate --all --output /tmp/sdk
    fastpath clients generate --repository build/public/repository \\
        --package acme_sdk --version 1.0.0 --output dist/acme-sdk --wheel dist/
    pip install dist/acme_sdk-1.0.0-py3-none-any.whl  # anywhere: no torch, no build kit
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from triton_fastpath.errors import FastpathError
from triton_fastpath.paths import DEFAULT_REPOSITORY, ROOT, SDK_PACKAGE
from triton_fastpath.sdk.codegen import load_labels, load_repository, load_tokenizers, plan_models
from triton_fastpath.sdk.package import Distribution, build_wheel, stale_files, write_distribution, write_files
from triton_fastpath.sdk.render import Naming, render_package

LOGGER = logging.getLogger("generate_clients")
IN_REPOSITORY = SDK_PACKAGE


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--repository", type=Path, default=DEFAULT_REPOSITORY, help="model repository (default: %(default)s)"
    )
    parser.add_argument(
        "--output",
        type=Path,
        help=f"where to write: the package folder (default {IN_REPOSITORY}), or with --package the distribution's "
        "folder (default build/sdk/<package>)",
    )
    parser.add_argument("--all", action="store_true", help="also generate clients for the steps of ensembles")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 and show a diff if stale")
    standalone = parser.add_argument_group("a standalone, installable SDK")
    standalone.add_argument("--package", help="its importable name, lower case (e.g. acme_sdk)")
    standalone.add_argument("--version", help="its version (PEP 440, e.g. 1.0.0); required with --package")
    standalone.add_argument("--wheel", type=Path, metavar="DIR", help="also build its wheel into DIR")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if (args.version or args.wheel) and not args.package:
        parser.error("--version and --wheel go with --package NAME (a standalone SDK)")
    if args.package and not args.version:
        parser.error("--package needs --version (e.g. --version 1.0.0)")
    if args.package and args.check:
        parser.error("--check compares this repository's SDK (clients/fastpath_models/); it does not go with --package")
    try:
        return _run(args)
    except FastpathError as error:
        LOGGER.error("clients generate: %s", error)
        return 1


def _run(args: argparse.Namespace) -> int:
    configs = load_repository(args.repository)
    plan = plan_models(configs, include_steps=args.all)
    labels = load_labels(args.repository, configs)
    tokenizers = load_tokenizers(args.repository, configs)
    for name, reason in sorted(plan.skipped.items()):
        LOGGER.info("skipped %s: %s", name, reason)
    if args.package:
        dist = Distribution(args.package, args.version)
        files = render_package(
            plan, configs, args.repository.name, labels, Naming(dist.package, "._runtime"), tokenizers=tokenizers
        )
        root = write_distribution(
            args.output or ROOT / "build" / "sdk" / dist.package, dist, files, args.repository.name
        )
        LOGGER.info("wrote %s %s (%s) in %s", dist.distribution, dist.version, ", ".join(plan.selected), root)
        if args.wheel:
            LOGGER.info("building the wheel ...")
            LOGGER.info("wheel: %s", build_wheel(root, args.wheel))
        return 0
    output = args.output or IN_REPOSITORY
    files = render_package(plan, configs, source=args.repository.name, labels=labels, tokenizers=tokenizers)
    if args.check:
        problems = stale_files(output, files)
        for text in problems.values():
            sys.stdout.write(text)
        if problems:
            LOGGER.error("%s is stale: run `make generate-clients` and commit the result", output)
            return 1
        LOGGER.info("%s is up to date (%s)", output, ", ".join(plan.selected))
        return 0
    changed = write_files(output, files)
    LOGGER.info(
        "generated %s in %s (%s)",
        ", ".join(plan.selected),
        output,
        f"changed: {', '.join(changed)}" if changed else "unchanged",
    )
    return 0
