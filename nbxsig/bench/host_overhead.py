"""Host time of a batch-1 ``nbxsig.stft`` call, without a GPU: ``python -m nbxsig.bench.host_overhead``.

The batch-1 istft (issue #3: n_fft=20, hop=5, 1×240000) runs 8 µs on an H200, so its eager call
time is host time: argument checks, backend dispatch, the launcher's arithmetic and the compiled
kernel's cached launch. This measures exactly the Python work nbxsig adds, on CPU tensors: the Triton
path is taken (``TRITON_INTERPRET=1`` lets it accept CPU tensors) and the kernel launch is replaced
by a no-op at the driver boundary -- :class:`~nbxsig.kernels._launch.CachedLaunch` runs its cached
path (key, handle lookup, stream query) up to the compiled launcher's ``run``, which does nothing.
Not included: the launcher's own C code and the driver call (``cuLaunchKernel``), and the CUDA
caching allocator (a CPU ``torch.empty`` stands in for it).

The ``backward`` mode times the spectral benchmark's istft forward+backward row at batch 1
(``istft(spec).backward(grad)``, the spectrum requiring grad) against the same calls of an
``autograd.Function`` that only allocates the output and the gradient: the difference is nbxsig's
share, the rest is autograd's (``Function.apply``, ``Tensor.backward``, the engine) and paid by
torch.istft's backward as well. On a GPU the engine also hands the backward to its device thread.

Prints the median per-call time over repeated blocks of calls, and with ``--profile`` the cProfile
hot spots. Example::

    python -m nbxsig.bench.host_overhead                 # istft, stft, istft forward+backward
    python -m nbxsig.bench.host_overhead --profile backward
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from collections.abc import Callable, Iterator

import torch


class _NoLaunch:
    """A compiled kernel's stand-in: ``run`` (the launcher) does nothing."""

    function = packed_metadata = None

    def run(self, *args) -> None:
        pass


class _NoKernel:
    """A jitted kernel's stand-in for ``kernel[grid](...)``: returns a handle that launches nothing."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: _NoLaunch()


@contextlib.contextmanager
def stubbed_launches() -> Iterator[None]:
    """Run nbxsig's cached-launch path on CPU tensors with every launch a no-op."""
    from ..kernels import _launch as L
    from ..kernels import stft as K

    launchers = [v for v in vars(K).values() if isinstance(v, L.CachedLaunch)]
    saved = [(c, c.kernel, c.handles, c.interpreted) for c in launchers]
    # Kernels still launched through Triton directly (the tiled paths; the others are in `launchers`).
    names = ("_ola_dft_kernel", "_frame_dft_kernel")
    saved_kernels = {n: getattr(K, n) for n in names}
    saved_globals = (L.CACHED_LAUNCH, torch._C._cuda_getDevice, torch._C._cuda_getCurrentRawStream)
    # CPU tensors pass the launchers' checks only where the interpreter is on; with Triton's JIT already
    # loaded (a GPU test run) the variable changes nothing else, and nothing is launched anyway.
    saved_interpret = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        for c in launchers:
            # The cached path is the GPU's; the interpreter would bypass it.
            c.kernel, c.handles, c.interpreted = _NoKernel(), {}, False
        for name in names:
            setattr(K, name, _NoKernel())
        L.CACHED_LAUNCH = True
        torch._C._cuda_getDevice = lambda: 0  # no device: device 0, stream 0
        torch._C._cuda_getCurrentRawStream = lambda device: 0
        _drop_plans(K)  # plans made before hold the real kernels' handles
        yield
    finally:
        for c, kernel, handles, interpreted in saved:
            c.kernel, c.handles, c.interpreted = kernel, handles, interpreted
        for name, kernel in saved_kernels.items():
            setattr(K, name, kernel)
        L.CACHED_LAUNCH, torch._C._cuda_getDevice, torch._C._cuda_getCurrentRawStream = saved_globals
        if saved_interpret is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = saved_interpret
        _drop_plans(K)  # plans made under the stubs hold their no-op handles


def _drop_plans(kernels) -> None:
    # What assigning one of the kernel module's settings does (see nbxsig.kernels.stft.on_retune).
    for hook in kernels._RETUNE_HOOKS:
        hook()


class _AllocOnly(torch.autograd.Function):
    """The forward+backward floor: autograd with the allocations of the istft's output and gradient."""

    @staticmethod
    def forward(ctx, spec, length):
        ctx.layout = (spec.shape, spec.stride(), spec.dtype)
        return torch.empty((spec.shape[0], length))

    @staticmethod
    def backward(ctx, grad):
        shape, strides, dtype = ctx.layout  # the spectrum's own layout, as nbxsig's backward writes it
        return torch.empty_strided(shape, strides, dtype=dtype), None


def cases(length: int = 240000, n_fft: int = 20, hop: int = 5) -> dict[str, tuple[Callable, Callable, str]]:
    """The timed calls -- the public functions with the issue's arguments, batch 1 -- each with what
    is not nbxsig's work: the allocation of its output alone (a CPU ``torch.empty`` of the output's
    shape); for the forward+backward, autograd itself (an ``autograd.Function`` that only allocates
    the output and the gradient, called and differentiated the same way)."""
    from .. import stft as S

    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, length, generator=g)
    w = torch.hann_window(n_fft)
    spec = torch.stft(x, n_fft, hop, window=w, return_complex=True)  # (1, 11, 48001) complex64
    n_frames = spec.shape[-1]
    spec_g = spec.clone().requires_grad_()
    gy = torch.randn(1, length, generator=g)

    def istft_backward():
        # The benchmark's forward+backward row (nbxsig.bench.spectral), batch 1.
        spec_g.grad = None
        S.istft(spec_g, n_fft, hop, window=w, length=length, backend="triton").backward(gy)

    def floor():
        spec_g.grad = None
        _AllocOnly.apply(spec_g, length).backward(gy)

    return {
        f"istft n_fft={n_fft} hop={hop}, 1×{length}": (
            lambda: S.istft(spec, n_fft, hop, window=w, length=length, backend="triton"),
            lambda: torch.empty((1, length), dtype=torch.float32, device=x.device),
            "the output's allocation",
        ),
        f"stft n_fft={n_fft} hop={hop}, 1×{length}": (
            lambda: S.stft(x, n_fft, hop, window=w, backend="triton"),
            lambda: torch.empty((1, n_fft // 2 + 1, n_frames, 2), dtype=torch.float32, device=x.device),
            "the output's allocation",
        ),
        f"backward: istft forward+backward n_fft={n_fft} hop={hop}, 1×{length}": (
            istft_backward,
            floor,
            "autograd with the two allocations",
        ),
    }


def time_calls(fns: list[Callable[[], object]], *, calls: int = 2000, repeats: int = 21) -> list[list[float]]:
    """Per-call times (µs) of ``fns``: for each, ``repeats`` blocks of ``calls`` back-to-back calls,
    the functions' blocks interleaved (so that a busy machine slows them alike)."""
    for fn in fns:
        for _ in range(200):
            fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, per_call in zip(fns, times, strict=True):
            t0 = time.perf_counter_ns()
            for _ in range(calls):
                fn()
            per_call.append((time.perf_counter_ns() - t0) / calls / 1e3)
    return times


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "which", nargs="*", help="istft, stft and/or backward (istft forward+backward; default all three)"
    )
    parser.add_argument("--calls", type=int, default=2000, help="calls per timed block")
    parser.add_argument("--profile", action="store_true", help="print cProfile's top entries too")
    args = parser.parse_args(argv)
    # The Triton path takes CPU tensors only under the interpreter, to be on before triton loads
    # (nbxsig imports it on first use); a NaN fill per output is test-suite cost, not the user's.
    os.environ["TRITON_INTERPRET"] = "1"
    os.environ.pop("NBXSIG_POISON_OUTPUTS", None)
    torch.set_num_threads(1)
    with stubbed_launches():
        for name, (fn, alloc, what) in cases().items():
            mode, _, name = name.rpartition(": ")
            if (mode or name.split()[0]) not in (args.which or ("istft", "stft", "backward")):
                continue
            call_t, alloc_t = time_calls([fn, alloc], calls=args.calls)
            med, low = statistics.median(call_t), min(call_t)
            amed, alow = statistics.median(alloc_t), min(alloc_t)
            print(
                f"{name}: {med:.2f} µs per call (median of {len(call_t)} blocks; fastest block {low:.2f}), "
                f"of which {what} {amed:.2f} ({alow:.2f}): nbxsig's host work "
                f"{med - amed:.2f} µs ({low - alow:.2f})"
            )
            if args.profile:
                import cProfile
                import pstats

                prof = cProfile.Profile()
                prof.enable()
                for _ in range(args.calls):
                    fn()
                prof.disable()
                pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
