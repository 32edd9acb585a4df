"""Timing, bandwidth and table formatting shared by every benchmark suite."""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch


@dataclass
class Case:
    """One benchmark row.

    Args:
        name: what is measured, e.g. "stft n_fft=20 hop=5, 64×240000".
        run: nbxsig's call (no arguments; inputs are closed over).
        baseline: the torch/torchaudio call computing the same thing, or None where torch cannot.
        bytes_moved: the fewest bytes the op must move (inputs read once + outputs written once).
        target: the issue's target, as text ("≥ 3×").
        check: optional ``() -> float`` returning the relative error of ``run`` against a reference.
        calls: how many op calls one ``run``/``baseline`` invocation makes (a CUDA graph of several
            back-to-back calls); the times are reported per call.
        latency: time each call on the host's clock from the call to its result being ready on the
            device (call + synchronize, :func:`latency_us`) instead of with CUDA events. For rows
            whose target is a latency, such as a streaming push.
    """

    name: str
    run: Callable[[], object]
    baseline: Callable[[], object] | None = None
    bytes_moved: int = 0
    target: str = ""
    check: Callable[[], float] | None = None
    notes: str = ""
    calls: int = 1
    latency: bool = False


@dataclass
class Result:
    name: str
    ours_us: float
    baseline_us: float | None
    gbps: float
    copy_fraction: float
    peak_extra_mb: float
    target: str
    rel_error: float | None
    notes: str = ""

    @property
    def speedup(self) -> float | None:
        return self.baseline_us / self.ours_us if self.baseline_us else None


def time_us(fn: Callable[[], object], *, warmup_ms: int = 25, rep_ms: int = 100) -> float:
    """Median time of ``fn`` in microseconds, measured with CUDA events by ``triton.testing.do_bench``."""
    import triton.testing

    return 1e3 * triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median")


class GraphReplay:
    """``fn`` captured in a CUDA graph (after ``warmup`` eager calls on a side stream); calling the
    object replays the graph, which times GPU work without Python's launch cost.

    It holds ``fn``, and with it every tensor ``fn`` closes over, for as long as it lives: a graph
    reads and writes its operands by address, so a replay after they were freed touches memory the
    allocator has since handed out or given back. (At 8d98586 the back-to-back chains of
    ``bench quant`` dropped their operand copies right after capture, and a later replay ended in an
    illegal memory access.)
    """

    def __init__(self, fn: Callable[[], object], *, warmup: int = 2) -> None:
        self.fn = fn
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # compiles and sets up workspaces outside the capture
            for _ in range(warmup):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            fn()

    def __call__(self) -> None:
        self.graph.replay()


def graph_chain(fns: list[Callable[[], object]]) -> GraphReplay:
    """The calls ``fns`` one after another in one CUDA graph. A single-call replay still contains the
    graph's launch latency (~8-10 µs on the H200); back to back, the calls show their device time,
    the figure a captured decode step is made of. The replay holds the list, so every call's
    operands live as long as the graph that reads them."""
    return GraphReplay(lambda: [fn() for fn in fns])


def latency_us(fn: Callable[[], object], *, device: torch.device, reps: int = 200) -> float:
    """Median wall time in microseconds from calling ``fn`` to its work being done on ``device``
    (``fn()`` then ``torch.cuda.synchronize``), over ``reps`` calls after a warm-up. Unlike
    :func:`time_us` it counts the host's time to launch, which a caller waiting for the result sees."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize(device)
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize(device)
        samples.append(time.perf_counter() - start)
    return 1e6 * statistics.median(samples)


def copy_bandwidth_gbps(device: torch.device, *, nbytes: int = 1 << 30) -> float:
    """Device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    us = time_us(lambda: dst.copy_(src))
    return 2 * nbytes / (us * 1e-6) / 1e9


def peak_extra_mb(fn: Callable[[], object], device: torch.device) -> float:
    """Peak device memory allocated during ``fn`` beyond what was allocated before it and beyond
    the result it returns, in MB."""
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    out = fn()
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    out_bytes = sum(o.untyped_storage().nbytes() for o in outs if isinstance(o, torch.Tensor))
    return max(0, peak - before - out_bytes) / 1e6


def measure(case: Case, *, device: torch.device, copy_gbps: float) -> Result:
    timer = (lambda fn: latency_us(fn, device=device)) if case.latency else time_us
    ours = timer(case.run) / case.calls
    base = timer(case.baseline) / case.calls if case.baseline is not None else None
    gbps = case.bytes_moved / (ours * 1e-6) / 1e9 if case.bytes_moved else 0.0
    return Result(
        name=case.name,
        ours_us=ours,
        baseline_us=base,
        gbps=gbps,
        copy_fraction=gbps / copy_gbps if copy_gbps else 0.0,
        peak_extra_mb=peak_extra_mb(case.run, device),
        target=case.target,
        rel_error=case.check() if case.check else None,
        notes=case.notes,
    )


@dataclass
class Environment:
    gpu: str
    torch: str
    triton: str
    commit: str
    date: str
    copy_gbps: float
    extra: dict = field(default_factory=dict)

    @classmethod
    def capture(cls, device: torch.device, copy_gbps: float) -> Environment:
        import triton

        # A copy of the checkout without .git (the GPU machine gets one) names its commit in NBXSIG_COMMIT.
        commit = os.environ.get("NBXSIG_COMMIT", "")
        if not commit:
            try:
                commit = subprocess.run(
                    ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
                ).stdout.strip()
            except (OSError, subprocess.CalledProcessError):
                commit = "unknown"
        return cls(
            gpu=torch.cuda.get_device_name(device),
            torch=torch.__version__,
            triton=triton.__version__,
            commit=commit,
            date=datetime.date.today().isoformat(),
            copy_gbps=copy_gbps,
            extra={"python": platform.python_version()},
        )


def format_table(results: list[Result]) -> str:
    """A Markdown table: time, baseline, ratio, GB/s, % of copy bandwidth, peak extra memory, error."""
    head = (
        "| case | nbxsig µs | torch µs | speed-up | target | GB/s | % of copy | extra MB | rel. error |\n"
        "|---|---:|---:|---:|---|---:|---:|---:|---:|"
    )
    rows = []
    for r in results:
        base = f"{r.baseline_us:.1f}" if r.baseline_us is not None else "—"
        ratio = f"{r.speedup:.2f}×" if r.speedup is not None else "—"
        err = f"{r.rel_error:.1e}" if r.rel_error is not None else "—"
        name = r.name + (f" ({r.notes})" if r.notes else "")
        rows.append(
            f"| {name} | {r.ours_us:.1f} | {base} | {ratio} | {r.target} | {r.gbps:.0f} | "
            f"{100 * r.copy_fraction:.0f}% | {r.peak_extra_mb:.1f} | {err} |"
        )
    return "\n".join([head, *rows])


def format_environment(env: Environment) -> str:
    return (
        f"GPU: {env.gpu}; torch {env.torch}; triton {env.triton}; Python {env.extra.get('python')}; "
        f"commit {env.commit}; {env.date}; measured device copy {env.copy_gbps:.0f} GB/s (read + write)"
    )
