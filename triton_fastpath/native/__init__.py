"""The kit's native onnxruntime backend for the embedded tritonserver (C++ in native/fastpath_ort).

- `build`: compiles `libtriton_fastpath_ort.so` (cached by a hash of its sources), installs it once
  in a server's backend directory (`<backends>/fastpath_ort/`, with its onnxruntime and custom-op
  links), and says clearly when no compiler is there so callers can fall back to Python.
- `cache_build`: compiles `libtritoncache_fastpath.so` (native/fastpath_cache: the two-tier response
  cache, in-process L1 + Redis L2, hiredis linked in), installs it in a server's cache directory,
  and turns its settings into `--cache-config fastpath,...` (namespace: `repository_namespace()`).

May import: `errors`, `paths`.
"""
