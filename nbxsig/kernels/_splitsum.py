"""Arrival counters for single-launch split reductions (int4 GEMV split-K, decode attention split-KV).

A kernel that splits a reduction over several programs writes each program's partial result to a
scratch buffer and then increments one counter per output tile; the program that sees the count
reach ``n_splits - 1`` is the last one, reads every partial in a fixed order, writes the output and
sets the counter back to 0. The reduction order never depends on which program arrives last, so the
result is deterministic, and the whole op is one launch (a second "combine" kernel costs a launch
on the host and a kernel boundary on the GPU).

The counters must be zero before a launch. Kernels leave them zero, so one buffer per (device,
stream) is reused: launches on one stream never overlap. Inside CUDA-graph capture each call gets
its own zeroed buffer instead (allocated from the graph's pool, zeroed by a memset node on every
replay), so graphs never share counters with each other or with eager calls on other streams.
"""

from __future__ import annotations

import torch

_MIN_COUNTERS = 4096
# (device, stream handle) -> buffers; older, smaller buffers stay referenced because a launch still
# in flight may use them.
_CACHE: dict[tuple[torch.device, int], list[torch.Tensor]] = {}


def zeroed_counters(n: int, device: torch.device) -> torch.Tensor:
    """An int32 tensor whose first ``n`` entries are zero, for a kernel that leaves them zero."""
    if device.type != "cuda":  # the interpreter runs programs one after another: nothing to share
        return torch.zeros(n, dtype=torch.int32, device=device)
    if torch.cuda.is_current_stream_capturing():
        return torch.zeros(n, dtype=torch.int32, device=device)
    key = (device, torch.cuda.current_stream(device).cuda_stream)
    buffers = _CACHE.get(key)
    if buffers is None or buffers[-1].numel() < n:
        buffers = _CACHE.setdefault(key, [])
        # Zeroed on the current stream, so it is ordered before every later launch on that stream.
        buffers.append(torch.zeros(max(n, _MIN_COUNTERS), dtype=torch.int32, device=device))
    return buffers[-1]
