"""Arrival counters for single-launch split reductions (int4 GEMV split-K, decode attention split-KV).

A kernel that splits a reduction over several programs writes each program's partial result to a
scratch buffer and then increments one counter per output tile; the program that sees the count
reach ``n_splits - 1`` is the last one, reads every partial in a fixed order, writes the output and
sets the counter back to 0. The reduction order never depends on which program arrives last, so the
result is deterministic, and the whole op is one launch (a second "combine" kernel costs a launch
on the host and a kernel boundary on the GPU).

The counters must be zero before a launch. Kernels leave them zero, so one buffer per (device,
stream) is reused: launches on one stream never overlap. Inside CUDA-graph capture each captured
call gets counters of its own that no other call, graph or stream ever uses, so graphs never share
counters with each other or with eager calls on other streams:

- with ``CAPTURE_ARENA`` (after one eager call on the device with it on), a slice of a per-device arena
  that was zeroed once, eagerly, before any capture could use it. Slices are handed out once and never
  reused (a few bytes per captured launch), and a graph's launches are ordered behind its previous
  launches (CUDA never runs one graph exec concurrently with itself), so the slice is zero at the
  start of every replay. No extra graph node.
- otherwise (arena off, not created yet, or used up) a fresh buffer from the graph's pool, zeroed by
  a memset node on every replay: one more node per call in the graph.
"""

from __future__ import annotations

import torch

_MIN_COUNTERS = 4096
# On: H200 at 1e74c26 (python -m nbxsig.bench.quant_sweep, back-to-back graph chains, same process),
# per call with memset nodes → arena: attention B=1 T=4096 13.07 → 12.02 µs, B=1 T=32768 41.64 → 40.47,
# B=16 T=4096 69.16 → 67.89, B=64 T=2048 127.61 → 127.63; int4 GEMV 4096×11008 17.20 → 16.05, 4096×4096
# 9.35 → 8.22, 11008×4096 17.28 → 16.21. Captured replays equal eager bit for bit (tests/test_splitsum.py).
CAPTURE_ARENA = True
_ARENA_COUNTERS = 1 << 18  # 1 MiB per device: ~16k captured launches of typical grids
_ALIGN = 32  # slices start on 128-byte lines: no two launches' counters share a cache line
# device -> [arena, next free counter]; slices are never given back.
_ARENAS: dict[torch.device, list] = {}
# (device, stream handle) -> buffers; older, smaller buffers stay referenced because a launch still
# in flight may use them.
_CACHE: dict[tuple[torch.device, int], list[torch.Tensor]] = {}


def zeroed_counters(n: int, device: torch.device) -> torch.Tensor:
    """An int32 tensor whose first ``n`` entries are zero, for a kernel that leaves them zero."""
    if device.type != "cuda":  # the interpreter runs programs one after another: nothing to share
        return torch.zeros(n, dtype=torch.int32, device=device)
    if torch.cuda.is_current_stream_capturing():
        arena = _ARENAS.get(device) if CAPTURE_ARENA else None
        if arena is not None and arena[1] + n <= arena[0].numel():
            start = arena[1]
            arena[1] = start + -(-n // _ALIGN) * _ALIGN
            return arena[0][start : start + n]
        return torch.zeros(n, dtype=torch.int32, device=device)
    if CAPTURE_ARENA and device not in _ARENAS:
        # Created outside capture and waited for once, so no replay can start before it is zero.
        _ARENAS[device] = [torch.zeros(_ARENA_COUNTERS, dtype=torch.int32, device=device), 0]
        torch.cuda.synchronize(device)
    key = (device, torch.cuda.current_stream(device).cuda_stream)
    buffers = _CACHE.get(key)
    if buffers is None or buffers[-1].numel() < n:
        buffers = _CACHE.setdefault(key, [])
        # Zeroed on the current stream, so it is ordered before every later launch on that stream.
        buffers.append(torch.zeros(max(n, _MIN_COUNTERS), dtype=torch.int32, device=device))
    return buffers[-1]
