"""The kit's native onnxruntime backend for the embedded tritonserver (C++ in native/fastpath_ort).

- `build`: compiles `libtriton_fastpath_ort.so` (cached by a hash of its sources), places it in a
  model folder, and says clearly when no compiler is there so callers can fall back to Python.

May import: `errors`, `paths`.
"""
