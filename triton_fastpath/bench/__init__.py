"""Side-by-side benchmark of the serving stacks, the latency budget, the compute limit and the config tuner.

`harness.run_benchmark` starts each system in its own process (naive FastAPI + torch, FastAPI +
onnxruntime, PyTriton, our Triton repository in both renderings), drives it with `loadgen` (a
separate asyncio process), with a redis-server as the L2 of our caches (`l2_redis`), measures the
in-process ceiling (`ceiling`, no server), and writes `results.json`, `table.md` (`report`, its
sections `report_markdown`) and `curves.png`. `tuner` sweeps the repository's batching and
instance settings (`tuner_space`: the knobs and their values) under a p99 bound. Entry points:
`fastpath bench serving`, `fastpath tune`.

May import: `recipes` (the repositories it serves), `models` (data sets, the torch models), `export`
(the text graph's pieces), `native` (the cache plugin's settings, the tokenizer's driver), `serve`
(the servers), `load` (the load engine), `config`, `processes` (also the core split and pinning),
`errors`, `paths`.
"""
