"""fastpath_client: the runtime of the typed Triton clients that `fastpath clients generate` writes.

It needs only `tritonclient[grpc]` and `numpy`. A generated SDK module holds its model's signature
and typed dataclasses; everything else (chunking to the max batch size, deadlines, retries within a
budget, adaptive throttling, shared memory, one error hierarchy) lives here:

- `runtime`: `ModelClient` / `AsyncModelClient`, the base classes of every generated client;
- `client_base`: what those two share (options, validation, chunking, retry decisions, `ClientStats`);
- `errors`: the one error hierarchy (`ClientError` and its subclasses);
- `retry`, `throttle`: when an attempt may be retried, and client-side adaptive throttling;
- `tensors`: model signatures, validation and row/column conversion;
- `shm`: system shared-memory regions for large inputs.

The modules import each other relatively, so a standalone SDK package can carry a copy of this
package as its `_runtime` (see `triton_fastpath.sdk.package`).
"""
