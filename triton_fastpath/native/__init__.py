"""The kit's native onnxruntime backend for the embedded tritonserver (C++ in native/fastpath_ort).

- `build`: compiles `libtriton_fastpath_ort.so` (cached by a hash of its sources), installs it once
  in a server's backend directory (`<backends>/fastpath_ort/`, with its onnxruntime and custom-op
  links), and says clearly when no compiler is there so callers can fall back to Python.

May import: `errors`, `paths`.
"""
