"""Cache jobs: warming the L1/L2 caches and calibrating the semantic cache.

- `warm`: `fastpath cache warm`, sends texts through the served model so Redis holds their answers;
- `semantic_calibration`: the semantic threshold from paraphrase pairs (wrong-hit rate measured).

May import: `config`, `models`, `load`, `errors`, `paths`.
"""
