"""The benchmark harness's own hazards (GPU only: it times CUDA work)."""

from __future__ import annotations

import pytest
import torch

from nbxsig.bench._harness import Case, GraphReplay, latency_us, measure


@pytest.mark.gpu
def test_gpu_graph_replay_keeps_its_operands(generator, cuda_device):
    # A graph reads by address: the replay must own what its function closed over, or a replay after
    # the caller dropped it reads memory handed to someone else (bench quant's illegal access).
    src = torch.randn(1 << 20, generator=generator).to(cuda_device)
    expected = src * 2
    out = torch.empty_like(src)

    def double(src=src):
        out.copy_(src * 2)

    replay = GraphReplay(double)
    del src, double
    torch.cuda.empty_cache()
    junk = [torch.full((1 << 20,), float("nan"), device=cuda_device) for _ in range(16)]
    out.zero_()
    replay()
    torch.cuda.synchronize()
    del junk
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


@pytest.mark.gpu
def test_gpu_latency_counts_host_time(cuda_device):
    import time

    # A call that spends 2 ms on the host and almost nothing on the device: CUDA events would not
    # see the host time, the latency timer must.
    x = torch.ones(4, device=cuda_device)

    def slow_host():
        time.sleep(2e-3)
        return x + 1

    assert latency_us(slow_host, device=cuda_device, reps=20) >= 2000
    result = measure(Case("slow host", slow_host, slow_host, latency=True), device=cuda_device, copy_gbps=0.0)
    assert result.ours_us >= 2000 and result.baseline_us >= 2000


# The filters and features suites compile many kernels (the filters part took 156 s of the 244 s that the
# whole gpu-marked suite took in eight workers on an H100): their rows are dealt to several tests, which
# `make gpu-test`'s workers take in parallel.
SUITE_PARTS = [("core", 0, 1), ("spectral", 0, 1), ("quant", 0, 1)]
SUITE_PARTS += [("features", k, 2) for k in range(2)] + [("filters", k, 4) for k in range(4)]


@pytest.mark.gpu
@pytest.mark.parametrize(("suite", "part", "parts"), SUITE_PARTS)
def test_gpu_suite_cases_build_and_run(suite, part, parts, cuda_device):
    # Every row of every suite builds, runs once and reports a finite relative error under 1% from its
    # own check (each row's precision bound is tighter; this catches a broken row, not a tolerance) at
    # the quick sizes: a suite that reaches for a renamed private helper (the features suite did, in
    # the twelfth round) fails here, not on the benchmark call. Rows part, part + parts, ... of the suite.
    import importlib
    import math

    module = importlib.import_module(f"nbxsig.bench.{suite}")
    cases = module.cases(quick=True)
    assert len(cases) >= parts
    for case in cases[part::parts]:
        case.run()
        if case.check is not None:
            err = case.check()
            assert math.isfinite(err) and err < 1e-2, (case.name, err)
    torch.cuda.synchronize()
