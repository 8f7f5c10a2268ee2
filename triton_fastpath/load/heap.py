"""Keep the load generator's own pauses out of what it measures.

CPython's full collection walks every tracked object; a generator holding tritonclient, gRPC,
numpy and protobuf has about 230,000 of them after start-up, and a full pass over them held the
event loop for 150-200 ms every 15-20 s of a 1,500 req/s open loop (measured with a loop-lag probe
and `gc.callbacks` during `fastpath soak`). The arrivals due in that time then left together, the
server saw a burst of ~250 requests at once, shed some as overloaded (correctly, for its budget),
and the window's p99 read 50-400 ms: the client's pause, reported as the server's. Freezing the heap
that exists when the load starts (`gc.freeze`: those objects move to a permanent generation the
collector skips) leaves the collector only what the run itself makes; in the same run the longest
collection fell to 7 ms and the sheds to 0.

    with frozen_heap():
        run the load
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_depth = [0]  # frozen_heap blocks open now, all threads


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Collect once, freeze what is alive, and unfreeze when the outermost such block ends.

    Re-entrant and thread-safe: a load engine run inside another (the soak's capacity window in
    its own run) keeps the heap frozen until the outer one ends. Objects made during the run are
    collected as usual.
    """
    with _lock:
        _depth[0] += 1
        if _depth[0] == 1:
            gc.collect()
            gc.freeze()
    try:
        yield
    finally:
        with _lock:
            _depth[0] -= 1
            if _depth[0] == 0:
                gc.unfreeze()
