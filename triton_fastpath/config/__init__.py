"""Configuration: what a model is and how it is written down for Triton.

- `spec`: typed model specs (`ModelSpec`, batching, queue policies), checked at birth;
- `tensors`: `TensorSpec` (one input or output), the data types and the name and dims checks;
- `validation`: the checks across specs (an ensemble's wiring, a whole repository);
- `render`: the renderer, spec -> `config.pbtxt` per target (embedded or NGC container);
- `settings`: `RepoSettings` (instances, batching, caches, service levels, tuning file), the one
  typed object every job reads its repository settings from, with its closed choices as enums
  (`Precision`) and its groups (`Batching`, `NativeBackend`);
- `service_levels`: the group `ServiceLevels` (what each model promises, the profiles, the queue
  shares cut from them); `caches`: the cache-lookup step's groups (`CacheTiers`, `SemanticCache`,
  `EmbedderChoice`);
- `rendering`: `Rendering` (fused, ensemble, graph) and what each cannot do, said once;
- `repository_plan`: a repository resolved before it is written: every model's spec as served, its
  `config.pbtxt` text, files and warmups (what the machine says handed in: native backend, tokenizers);
- `plan`: the serving plan, what a build or an import serves (`plan_serving`: options, tuning file
  and target -> settings and the notes that explain them; the rendering and its fallbacks decided once);
- `tensorrt`: TensorRT optimisation profiles and the engine plan for the container target.

May import: `triton_fastpath.errors`, `triton_fastpath.paths`. Nothing here starts a process or
touches a model file.
"""
