"""Publish the semantic cache's calibration: wrong-hit and hit rates against the threshold, with and
without confidence gating and the negation guard, measured on the model in build/.

The measurement is `triton_fastpath.cache.semantic_calibration.calibrate`, the same one
`fastpath build --semantic` runs on every build to choose the served setting. This command
writes it up: build/semantic-threshold/semantic-threshold.{md,png} and build/semantic-calibration.json;
with `--embedder NAME` (an imported sentence-transformers encoder, e.g. `minilm`),
semantic-threshold-NAME.{md,png}. `--publish` also writes them to docs/results/, the .md headed by
date, commit, machine and command (a checkout with uncommitted changes is refused).

    fastpath cache threshold [--perturbed 5000] [--max-wrong 0.005] [--embedder minilm]
    fastpath cache threshold --publish                      # docs/results/semantic-threshold.*
    fastpath cache threshold --embedder minilm --publish    # docs/results/semantic-threshold-minilm.*
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
from pathlib import Path

from triton_fastpath.cache.embedders import resolve_embedder
from triton_fastpath.cache.semantic_calibration import CHOICE_SAFETY, Calibration, measure_semantic
from triton_fastpath.cache.semantic_sweep import KINDS, MAX_WRONG_RATE
from triton_fastpath.cli.measuring import cannot_publish
from triton_fastpath.config.caches import SemanticCache
from triton_fastpath.config.settings import RepoSettings
from triton_fastpath.errors import FastpathError
from triton_fastpath.paths import BUILD_DIR, RESULTS_DIR

OUT_DIR = BUILD_DIR / "semantic-threshold"

KIND_NAMES = {
    "heldout": "held-out",
    "case": "upper case",
    "punct": "punctuation",
    "drop_word": "dropped word",
    "negate": "'not' inserted",
}


def curve_rows(rows: list[dict], margin: float, guarded: bool) -> list[dict]:
    return sorted(
        (r for r in rows if r["min_margin"] == margin and r["guarded"] == guarded), key=lambda r: r["threshold"]
    )


def table(rows: list[dict], chosen: dict | None) -> list[str]:
    lines = [
        "| threshold | hits | wrong | wrong-hit rate | "
        + " | ".join(f"{KIND_NAMES[k]} hit rate" for k in KINDS)
        + " |",
        "|---|---:|---:|---:|" + "---:|" * len(KINDS),
    ]
    for r in rows:
        mark = (
            " **(chosen)**"
            if chosen
            and (r["threshold"], r["min_margin"], r["guarded"])
            == (chosen["threshold"], chosen["min_margin"], chosen["guarded"])
            else ""
        )
        cells = " | ".join(f"{r[k + '_hit_rate']:.1%}" for k in KINDS)
        lines.append(f"| {r['threshold']}{mark} | {r['hits']} | {r['wrong']} | {r['wrong_rate']:.2%} | {cells} |")
    return lines


def results_stem(embedder: str) -> str:
    """docs/results/<stem>.md/.png: the bundled embedder's write-up keeps its name; others get theirs."""
    return "semantic-threshold" if embedder == "embed" else f"semantic-threshold-{embedder}"


def write_outputs(found: Calibration, command: str, out_dir: Path = OUT_DIR, *, publish: bool = False) -> list[Path]:
    """The write-up (.md, .png) in `out_dir`, and build/semantic-calibration.json; with `publish`,
    also docs/results/<stem>.{md,png}, the .md headed by date, commit, machine and `command`."""
    chosen = found.chosen
    stem = results_stem(found.embedder)
    margin = chosen["min_margin"] if chosen else max(r["min_margin"] for r in found.rows)
    plain = found.best_without_gating()
    lines = [
        "# Semantic cache: calibrated on every build",
        "",
        "The build runs the same measurement with `fastpath build --semantic` and ships its choice.",
        "",
        f"Cache: the {found.cache_texts:,} training texts, answered by the served INT8 model. Queries: "
        + ", ".join(f"{n:,} {KIND_NAMES[k]}" for k, n in found.queries.items())
        + " (perturbations of training texts). A hit is wrong when the neighbour's label differs from the "
        "label the served model gives the query itself. Queries with the same tokens as a cached text are "
        "exact-cache hits and are left out. The setting is chosen on a random half of the queries (most "
        f"punctuation + dropped-word hits with wrong hits under {found.max_wrong_rate * CHOICE_SAFETY:.2%}, "
        f"half the bound) and must keep wrong hits under {found.max_wrong_rate:.1%} on the other half; the "
        f"tables below are that other half. Embedder: `{found.embedder}` ({found.embedder_dimension} dims); "
        f"{found.cost_note()} (batches of 32 held-out texts in length buckets).",
        "",
        "## Result",
        "",
    ]
    if chosen is None:
        lines.append(f"**No setting kept wrong hits under {found.max_wrong_rate:.1%}: the layer stays off.**")
    else:
        c = found.checked or {}
        lines += [
            f"- Chosen: cosine >= **{chosen['threshold']}**, confidence margin >= **{chosen['min_margin']}**, "
            f"negation guard **{'on' if chosen['guarded'] else 'off'}**"
            + (f" ({found.rejected})" if found.rejected else "")
            + ".",
            f"- Checked on the other half: **{c.get('wrong_rate', 0):.2%} wrong** of {c.get('hits', 0)} hits; "
            f"hit rates: punctuation {c.get('punct_hit_rate', 0):.0%}, "
            f"dropped word {c.get('drop_word_hit_rate', 0):.0%}, "
            f"held-out {c.get('heldout_hit_rate', 0):.2%}, 'not' inserted {c.get('negate_hit_rate', 0):.0%}.",
        ]
    if plain is None:
        lines.append(
            "- Without confidence gating (margin 0, no guard) the build's rule finds no threshold (under "
            f"{found.max_wrong_rate * CHOICE_SAFETY:.2%} on the choice half): a plain cosine threshold "
            "is not safe for this model (first table)."
        )
    else:
        lines.append(
            f"- Without confidence gating the build's rule would pick {plain['threshold']} "
            f"({plain['wrong_rate']:.2%} wrong on the choice half)."
        )
    sections = [
        ("No gating (margin 0, no guard)", 0.0, False),
        (f"Confidence margin >= {margin}", margin, False),
        (f"Confidence margin >= {margin} and the negation guard", margin, True),
        ("The negation guard alone (margin 0)", 0.0, True),
    ]
    for title, m, g in sections:
        lines += ["", f"## {title}", "", *table(curve_rows(found.checked_rows, m, g), chosen)]
    if found.examples:
        lines += ["", "## Wrong hits the chosen setting still serves (all queries)", ""]
        lines += ["| kind | query | cached neighbour | cosine |", "|---|---|---|---:|"]
        for e in found.examples:
            clean = [str(e[k]).replace("|", "/")[:140] for k in ("query", "cached")]
            lines.append(f"| {KIND_NAMES[e['kind']]} | {clean[0]} | {clean[1]} | {e['cosine']:.4f} |")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / f"{stem}.md", out_dir / f"{stem}.png", BUILD_DIR / "semantic-calibration.json"]
    written[0].write_text("\n".join(lines) + "\n")
    written[2].write_text(json.dumps(dataclasses.asdict(found), indent=1, default=str))
    plot(found, margin, written[1])
    if publish:
        from triton_fastpath.bench.provenance import publish as publish_result

        written.append(publish_result(written[0].name, written[0].read_text(), command))
        written.append(Path(shutil.copy2(written[1], RESULTS_DIR / written[1].name)))
    print("wrote " + ", ".join(str(path) for path in written))
    return written


def plot(found: Calibration, margin: float, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    curves = (("no gating", 0.0, False, "tab:gray"), (f"margin >= {margin}", margin, False, "tab:blue"))
    curves += ((f"margin >= {margin} + guard", margin, True, "tab:green"),)
    for label, m, g, color in curves:
        rows = curve_rows(found.checked_rows, m, g)
        xs = [r["threshold"] for r in rows]
        left.plot(xs, [r["wrong_rate"] * 100 for r in rows], marker="o", color=color, label=label)
        if g:
            continue
        right.plot(
            xs, [r["punct_hit_rate"] * 100 for r in rows], marker="^", color=color, label=f"{label}: punctuation"
        )
        right.plot(
            xs,
            [r["drop_word_hit_rate"] * 100 for r in rows],
            marker="x",
            ls="--",
            color=color,
            label=f"{label}: dropped word",
        )
    left.axhline(found.max_wrong_rate * 100, color="red", lw=0.8, label=f"{found.max_wrong_rate:.1%} bound")
    left.set(xlabel="cosine threshold", ylabel="wrong hits (% of semantic hits)", title="Hit precision")
    right.set(xlabel="cosine threshold", ylabel="hit rate (%)", title="Near-duplicate hit rate")
    for axis in (left, right):
        axis.legend(fontsize=7)
        axis.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--perturbed", type=int, default=5000, help="training texts to perturb (default %(default)s)")
    parser.add_argument("--max-wrong", type=float, default=MAX_WRONG_RATE, help="wrong-hit bound (default %(default)s)")
    parser.add_argument(
        "--embedder",
        default="embed",
        metavar="NAME",
        help="the semantic layer's embedder: 'embed' (bundled, default) or an imported sentence-transformers "
        "encoder such as 'minilm' (`make import-minilm`), as `fastpath build --semantic-embedder` takes",
    )
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="where the write-up goes (default: %(default)s)")
    parser.add_argument(
        "--publish",
        action="store_true",
        help="also write it to docs/results/, headed by date, commit, machine and command",
    )
    args = parser.parse_args(argv)
    if cannot_publish(args.publish, "fastpath cache threshold"):
        return 2
    try:
        choice = resolve_embedder(args.embedder).choice
    except FastpathError as error:
        print(f"cache threshold: {error}", file=sys.stderr)
        return 2
    found = measure_semantic(RepoSettings(semantic=SemanticCache(embedder=choice)), args.max_wrong, args.perturbed)
    print(found.summary())
    command = " ".join(["fastpath cache threshold", *(argv if argv is not None else sys.argv[1:])])
    write_outputs(found, command, args.out, publish=args.publish)
    return 0


if __name__ == "__main__":
    sys.exit(main())
