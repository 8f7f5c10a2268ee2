"""The build: specs -> verified artifacts -> an assembled model repository.

- `steps`: one model's verified export steps (torch -> ONNX -> INT8), skipped when up to date;
- `repository`: builds the bundled models and writes `model_repository/` (and variants);
- `assemble`: copies weights, adapters and backend code into a repository; the TensorRT plan.

May import: `config`, `models`, `export`, `cache` (semantic calibration), `errors`, `paths`.
"""
