"""Export steps, each a plain function that also runs alone (`fastpath export onnx|int8|verify`).

- `torch2onnx` / `onnx2int8`: the exports; `verify`: parity between an export and its source;
- `onnx_run` / `inputs`: running ONNX models and generating their inputs; `heads`: classifier heads;
- `text_graph` / `text_graph_check`: tokenizer.json + encoder -> one text-in graph (onnxruntime-extensions
  `BertTokenizer` op), and its proof against `tokenizers` + the encoder (docs/text-graph.md);
  `text_graph_tokenizer`: its tokenizer half (the op's attributes from tokenizer.json, text -> ids);
- `text_path`: the post graph (encoder + head, ids in) the native backend runs after its C++
  tokenizer, and the proof that the C++ ids equal `tokenizers'` (the C++ tokenizer passed in);
- `multilingual_corpus`: the seeded 30-locale test corpus, hostile texts and invalid UTF-8.

May import: `errors`, `ort_extensions` only: the build and the import call these, never the other way round.
"""
