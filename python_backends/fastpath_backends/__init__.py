"""Pure logic of the Triton Python models: no `triton_python_backend_utils` import anywhere here.

The build copies this package next to each Python model's `model.py`, so a repository is
self-contained and loads the same way in the embedded server and in the NGC container.
"""
