"""Bring your own model: import a user's ONNX file or Hugging Face folder, check it, serve it.

- `importer`: `fastpath import hf`, a folder imported by its kind: `hf_classifier` (a transformers
  classifier), `sentence_import` (sentence-transformers, SetFit); `onnx_import`: `fastpath import onnx`;
- `checks`: what is checked before anything is written (names, tensors, labels, samples);
- `served_check`: the imported model answered through a real server, compared with the source;
- `public`: public models from pinned registry wheels (Magika).

May import: `config`, `models`, `recipes`, `export`, `cache` (the semantic embedder's record), `serve` (the
served check's server), `engine` (the step engine its recipes run on), `errors`,
`paths`.
"""
