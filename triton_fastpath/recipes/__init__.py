"""Recipes: how each model is made, from its source to verified artifacts to an assembled model
repository, every recipe run on the one step engine (`triton_fastpath.engine`: a recipe's
declared steps, `Declared`, run in order by `Pipeline.run`, each with its status; a file-making
step skipped when up to date by content, `triton_fastpath.engine.freshness`).

- `steps`: one model's verified export steps (torch -> ONNX -> INT8), skipped when up to date;
- `reports`: what a model's build reports (variants, gates, checks, step statuses) and returns
  (`ModelArtifact`);
- `served_files`: the files and warmup samples each Triton model of a text pipeline gets;
- `bundled_recipes`: the bundled models' recipes (`sentiment`, `digits`, `embed`);
- `repository`: builds the bundled models and writes `model_repository/` (and variants);
- `served_here`: what this machine (the native backend) and the tokenizer files tell a repository's plan
  (`config.repository_plan`), and `plan_here`, which plans with them;
- `assemble`: writes a repository's plan (configs, weights, adapters and backend code); the TensorRT plan;
- `text_path_step`: a text model's native text path (the C++ tokenizer in fastpath_ort + the post graph),
  proven exact against `tokenizers`, or refused (the embedded target's graph rendering);
- `text_graph_step`: a text model's tokenizer-inside-ONNX graph, built, proven against `tokenizers`, or
  refused (the container target's graph rendering).

May import: `config`, `models`, `export`, `cache` (semantic calibration), `native` (the backend and the
cache plugin the assembled models name), `sdk` (the SDK's tokenizers beside the repository), `engine` (the step
engine), `errors`, `paths`.
"""
