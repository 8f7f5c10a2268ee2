"""Cache jobs: warming the L1/L2 caches and calibrating the semantic cache.

- `warm`: `fastpath cache warm`, sends texts through the served model so Redis holds their answers;
- `semantic_calibration`: the semantic threshold from paraphrase pairs (wrong-hit rate measured);
- `semantic_sweep`: the calibration's pure part: the settings it scores, their rates, the choice.

May import: `config`, `models`, `load`, `errors`, `paths`.
"""
