"""The kit's native libraries for the embedded tritonserver (C++ in native/): the onnxruntime backend
and the response cache, on one common layer (native/common) and Triton's vendored r24.10 headers.

- `toolchain`: the one compiler and installer: compiles any of the C++ into `build/native/<hash>/`
  (the hash over sources, every header they include, flags and compiler), installs a library in
  Triton's `<dir>/<name>/` layout (staged, renamed into place), runs the C++ test drivers.
- `ort_backend`: compiles `libtriton_fastpath_ort.so` (cached by a hash of its sources), installs it once
  in a server's backend directory (`<backends>/fastpath_ort/`, with its onnxruntime and custom-op
  links), and says clearly when no compiler is there so callers can fall back to Python.
- `cache_plugin`: compiles `libtritoncache_fastpath.so` (native/fastpath_cache: the two-tier response
  cache, in-process L1 + Redis L2, hiredis linked in), installs it in a server's cache directory,
  and turns its settings into `--cache-config fastpath,...` (namespace: `repository_namespace()`).
- `tokenizer_driver` and `cache_checks`: the C++ tokenizer's driver, the cache's decoder fuzz and
  ThreadSanitizer stress.

May import: `errors`, `paths`, `ort_extensions`.
"""
