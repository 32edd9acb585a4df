"""Arrival counters of the single-launch split reductions under CUDA-graph capture (GPU only)."""

from __future__ import annotations

import pytest
import torch

from nbxsig.attention import decode_attention
from nbxsig.kernels import _splitsum
from nbxsig.kernels import decode_attention as KA
from nbxsig.kernels import int4_gemv as KG
from nbxsig.quant import int4_linear, quantize_int4
from nbxsig.testing import random_tensor


def _capture(fn):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()  # eager warm-up: compiles, and creates the counter arena
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


@pytest.mark.gpu
@pytest.mark.parametrize(
    "arena,switches,gemv_switches",
    [(True, {}, {}), (False, {}, {}), (True, {"PDL": False, "Q_IN_LOOP": False}, {"PDL": False})],
    ids=["arena", "memset", "arena-switches"],
)
def test_gpu_captured_split_kernels_match_eager(
    arena, switches, gemv_switches, generator, cuda_device, monkeypatch
):
    """Several split launches in one graph, two graphs replayed in turn and on two streams at once:
    every replay equals the eager result bit for bit (a counter left non-zero, or shared by two
    launches, would pick the wrong last program and break this). With decode attention's and the
    GEMV's ``PDL`` (on by default on an H100/H200) the captured launches depend on each other
    programmatically; the third case turns both off, and attention's ``Q_IN_LOOP`` (on by default
    for these multi-split calls) off."""
    monkeypatch.setattr(_splitsum, "CAPTURE_ARENA", arena)
    for name, value in switches.items():
        monkeypatch.setattr(KA, name, value)
    for name, value in gemv_switches.items():
        monkeypatch.setattr(KG, name, value)
    q = random_tensor((1, 32, 128), generator=generator, dtype=torch.float16, device=cuda_device)
    k = random_tensor((1, 8, 4096, 128), generator=generator, dtype=torch.float16, device=cuda_device)
    v = random_tensor((1, 8, 4096, 128), generator=generator, dtype=torch.float16, device=cuda_device)
    w = quantize_int4(random_tensor((1000, 4096), generator=generator, device=cuda_device), 128)
    x = random_tensor((1, 4096), generator=generator, dtype=torch.bfloat16, device=cuda_device)

    def step():
        a = decode_attention(q, k, v, backend="triton")
        b = decode_attention(q * 2, k, v, backend="triton")
        return a, b, int4_linear(x, w, backend="triton"), int4_linear(x * 2, w, backend="triton")

    want = step()
    dev = q.device  # "cuda:0": the arena is keyed by the tensors' device, which carries the index
    before = _splitsum._ARENAS[dev][1] if arena else None
    g1, out1 = _capture(step)
    g2, out2 = _capture(step)
    if arena:
        # Four launches per capture, each on counters of its own.
        assert _splitsum._ARENAS[dev][1] >= before + 8 * _splitsum._ALIGN
    for _ in range(3):
        g1.replay()
        g2.replay()
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    s1.wait_stream(torch.cuda.current_stream())
    s2.wait_stream(torch.cuda.current_stream())
    for _ in range(5):
        with torch.cuda.stream(s1):
            g1.replay()
        with torch.cuda.stream(s2):
            g2.replay()
    torch.cuda.current_stream().wait_stream(s1)
    torch.cuda.current_stream().wait_stream(s2)
    torch.cuda.synchronize()
    for got in (out1, out2):
        for a, b in zip(got, want, strict=True):
            assert torch.equal(a, b)
