"""Filter benchmarks: depthwise 2-D (NCHW and channels_last), long 1-D FIR, filter banks, resampling and
the kornia-style blurs, each against torch (cuDNN) / torchaudio in the same process.

Baselines: ``F.conv2d``/``F.conv1d`` with ``groups=C`` (what a torch user writes); torchaudio's
``resample`` when torchaudio is importable, else nbxsig's torch backend (torchaudio's algorithm with the
bank cached, i.e. a slightly faster baseline); kornia is not on the GPU machine, so the blurs compare
against ``F.pad`` + ``F.conv2d`` (separable for the 31×31 Gaussian), the issue's second baseline.
"""

from __future__ import annotations

from functools import lru_cache

import torch
import torch.nn.functional as F

from .. import filters as nf
from ..kernels import depthwise as dk
from ..reference.depthwise import mark_shared_taps
from ._harness import Case

_BLUR_SHAPE = (8, 3, 2048, 2048)


def _patched(name: str, value, fn):
    """``fn`` run with the kernel module's constant ``name`` set to ``value`` (a tile/threshold variant)."""

    def run():
        saved = getattr(dk, name)
        setattr(dk, name, value)
        try:
            return fn()
        finally:
            setattr(dk, name, saved)

    return run


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm()).item()


def _conv2d_cases(n, c, h, w, k, dtype, layout, target, dev, variants=()) -> list[Case]:
    """The Triton stencil (``backend="triton"``), for channels_last also the auto dispatch (what a user
    gets: the stencil or cuDNN by :func:`nbxsig.filters._cudnn_is_faster`), and tile variants
    ``(BLOCK_C, ROWS, BLOCK_W, num_warps, static)`` of the band stencil or ``("ring", CYCLES, BLOCK_W,
    num_warps)`` of the ring stencil."""
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(n, c, h, w, device=dev, dtype=torch.float32, generator=g).to(dtype)
    if layout == "channels_last":
        x = x.to(memory_format=torch.channels_last)
    wt = torch.randn(c, k, k, device=dev, generator=g) / k
    w_torch = wt.to(dtype)[:, None]
    name = f"depthwise2d {str(dtype)[6:]} {layout} {n}×{c}×{h}×{w} k={k}"

    def check(backend) -> float:
        ref = F.conv2d(x[:1].double(), wt.double()[:, None], padding=k // 2, groups=c)
        return _rel(nf.depthwise_conv2d(x[:1], wt, backend=backend), ref)

    def variant(cfg):
        def run():
            return dk._forward(
                x, wt, co=c, ho=h, wo=w, div=1, j=1, stride=(1, 1), top=k // 2, left=k // 2,
                boundary="zeros", out_dtype=x.dtype, config=cfg,
            )  # fmt: skip

        return run

    bytes_moved = 2 * x.numel() * x.element_size()
    out = [
        Case(
            name=name,
            run=lambda: nf.depthwise_conv2d(x, wt, backend="triton"),
            baseline=lambda: F.conv2d(x, w_torch, padding=k // 2, groups=c),
            bytes_moved=bytes_moved,
            target=target,
            check=lambda: check("triton"),
        )
    ]
    if layout == "channels_last":
        out.append(
            Case(
                name=f"{name} auto dispatch",
                run=lambda: nf.depthwise_conv2d(x, wt),
                baseline=lambda: F.conv2d(x, w_torch, padding=k // 2, groups=c),
                bytes_moved=bytes_moved,
                target=target,
                check=lambda: check(None),
            )
        )
    for cfg in variants:
        if cfg[0] == "ring":
            tile = f"ring cycles {cfg[1]} W{cfg[2]} w{cfg[3]}"
        else:
            tile = f"C{cfg[0]} R{cfg[1]} W{cfg[2]} w{cfg[3]}{' static' if cfg[4] else ''}"
        out.append(
            Case(
                name=f"{name} tile {tile} (variant)",
                run=variant(cfg),
                bytes_moved=bytes_moved,
            )
        )
    return out


@lru_cache(maxsize=1)
def _fir_input(b: int, c: int, n: int, dev) -> torch.Tensor:
    """One input for every FIR row (1.3 GB each otherwise: the suite holds all its cases at once)."""
    return torch.randn(b, c, n, device=dev, generator=torch.Generator(device=dev).manual_seed(1))


def _fir_case(k: int, *, path: str, target: str, dev, quick: bool, tile=None) -> Case:
    """``path``: "tensor-core" or "direct" (the stencil forced, to measure the crossover); ``tile``: a
    ``_TOEPLITZ_TILE`` variant."""
    b, c, n = (8, 64, 160000) if quick else (32, 64, 160000)
    x = _fir_input(b, c, n, dev)
    w = torch.randn(c, k, device=dev, generator=torch.Generator(device=dev).manual_seed(k)) / k**0.5

    def call():
        return nf.depthwise_conv1d(x, w, backend="triton")

    run = call
    if path == "direct":
        run = _patched("_DOT_MIN_TAPS", 1 << 30, call)
    elif tile is not None:
        run = _patched("_TOEPLITZ_TILE", tile, call)
    label = f"tile {tile} (variant)" if tile is not None else f"({path})"
    return Case(
        name=f"1-D FIR fp32 {b}×{c}×{n}, {k} taps {label}",
        run=run,
        baseline=None if tile is not None else (lambda: F.conv1d(x, w[:, None], padding=k // 2, groups=c)),
        bytes_moved=2 * x.numel() * 4,
        target="" if tile is not None else target,
        check=lambda: _rel(
            run()[:1], F.conv1d(x[:1].double(), w.double()[:, None], padding=k // 2, groups=c)
        ),
    )


def _resample_case(orig: int, new: int, dev, quick: bool, tile=None) -> Case:
    """``tile``: a ``_RESAMPLE_TILE`` variant (no baseline)."""
    b = 8 if quick else 64
    g = torch.Generator(device=dev).manual_seed(2)
    x = torch.randn(b, orig * 10, device=dev, generator=g)
    try:
        import torchaudio.functional as taf

        baseline, who = (lambda: taf.resample(x, orig, new)), "torchaudio"
    except ImportError:
        baseline, who = (
            (lambda: nf.resample(x, orig, new, backend="torch")),
            "torchaudio algorithm, bank cached",
        )
    out_len = -(-new * x.shape[1] // orig)
    run = lambda: nf.resample(x, orig, new, backend="triton")  # noqa: E731
    if tile is not None:
        run = _patched("_RESAMPLE_TILE", tile, run)
    return Case(
        name=f"resample {orig}→{new}, {b}×10 s" + (f" tile {tile} (variant)" if tile is not None else ""),
        run=run,
        baseline=None if tile is not None else baseline,
        bytes_moved=(x.numel() + b * out_len) * 4,
        target="" if tile is not None else "≥ 8×",
        check=lambda: _rel(run()[:2], nf.resample(x[:2].double(), orig, new)),
        notes="" if tile is not None else f"baseline: {who}",
    )


def _form_label(form: str, arg) -> str:
    if form == "two-pass":
        return " two-pass unchunked" if arg >= 1 << 40 else f" two-pass chunk {arg >> 20} MB"
    if form == "tensor-core":
        return f" tensor-core tile {arg}"
    if form == "prefetch":
        return f" fused tile {arg[1]}, L2 prefetch {arg[0]} rows ahead"
    if form == "taps in registers":
        return f" fused tile {arg}, taps in registers"
    return f" {form}" + (f" tile {arg}" if arg is not None else "")


def _blur_case(k: int, sigma: float, *, separable_baseline: bool, target: str, dev, forms) -> list[Case]:
    """The public call against torch, and ``forms`` of the separable kernels as variants: ("fused",
    ``_separable_fused`` config or None), ("two-pass", chunk budget), ("tensor-core", ``_separable_dot``
    tile or None), ("prefetch", (rows ahead, fused config)) -- ``_LONG_PREFETCH`` set to that, ("taps in
    registers", fused config) -- per-channel taps the kernel loads (not passed as arguments)."""
    g = torch.Generator(device=dev).manual_seed(3)
    x = torch.rand(*_BLUR_SHAPE, device=dev, generator=g)
    g1 = nf.gaussian_kernel1d(k, sigma).float().to(dev)
    p = k // 2
    if separable_baseline:
        wy = g1[None, None, :, None].expand(3, 1, k, 1).contiguous()
        wx = g1[None, None, None, :].expand(3, 1, 1, k).contiguous()

        def baseline():
            y = F.conv2d(F.pad(x, (0, 0, p, p), mode="reflect"), wy, groups=3)
            return F.conv2d(F.pad(y, (p, p, 0, 0), mode="reflect"), wx, groups=3)
    else:
        w2 = (g1[:, None] * g1[None, :])[None, None].expand(3, 1, k, k).contiguous()

        def baseline():
            return F.conv2d(F.pad(x, (p, p, p, p), mode="reflect"), w2, groups=3)

    name = f"gaussian_blur2d {k}×{k} reflect fp32 {'×'.join(map(str, _BLUR_SHAPE))}"
    # Marked like the filters' own cached taps (the long path then takes them as kernel arguments);
    # the "taps in registers" form runs an unmarked copy.
    taps = mark_shared_taps(g1[None].expand(3, k).contiguous(), g1)
    plain = taps.clone()
    pads = (p, p, p, p)

    def variant(form, arg):
        if form == "fused":
            return lambda: dk._separable_fused(
                x, taps, taps, stride=(1, 1), pads=pads, boundary="reflect", config=arg
            )
        if form == "tensor-core":
            return lambda: dk._separable_dot(x, taps, taps, pads=pads, boundary="reflect", config=arg)
        if form == "prefetch":
            return _patched("_LONG_PREFETCH", arg[0], variant("fused", arg[1]))
        if form == "taps in registers":
            return lambda: dk._separable_fused(
                x, plain, plain, stride=(1, 1), pads=pads, boundary="reflect", config=arg
            )
        return lambda: dk._separable_chunked(
            x, taps, taps, stride=(1, 1), pads=pads, boundary="reflect", budget=arg
        )

    return [
        Case(
            name=name,
            run=lambda: nf.gaussian_blur2d(x, k, (sigma, sigma), backend="triton"),
            baseline=baseline,
            bytes_moved=2 * x.numel() * 4,
            target=target,
            check=lambda: _rel(
                nf.gaussian_blur2d(x[:1], k, (sigma, sigma), backend="triton"),
                nf.gaussian_blur2d(x[:1].double(), k, (sigma, sigma), backend="torch"),
            ),
            notes="baseline: pad + separable F.conv2d" if separable_baseline else "baseline: pad + F.conv2d",
        )
    ] + [
        Case(
            name=f"{name}{_form_label(form, arg)} (variant)",
            run=variant(form, arg),
            bytes_moved=2 * x.numel() * 4,
            check=lambda form=form, arg=arg: _rel(
                variant(form, arg)()[:1],
                nf.gaussian_blur2d(x[:1].double(), k, (sigma, sigma), backend="torch"),
            ),
        )
        for form, arg in forms
    ]


def cases(*, quick: bool = False) -> list[Case]:
    dev = torch.device("cuda")
    big = (8, 64, 512, 512) if quick else (32, 64, 512, 512)
    out = []
    # Variants: (BLOCK_C, ROWS, BLOCK_W, num_warps, static). The defaults are _tiles' choice.
    cl = "channels_last"
    ncl = "never slower"
    out += _conv2d_cases(*big, 3, torch.float32, cl, f"≥ 1× ({ncl})", dev, [(64, 4, 8, 4, False)])
    out += _conv2d_cases(*big, 5, torch.float32, cl, f"≥ 1× ({ncl})", dev)
    out += _conv2d_cases(
        *big, 7, torch.float32, cl, f"≥ 1× ({ncl})", dev, [(32, 4, 16, 4, False), (64, 8, 8, 4, False)]
    )
    out += _conv2d_cases(
        *big, 7, torch.float16, cl, f"≥ 1× ({ncl})", dev, [(32, 4, 16, 4, False), (64, 4, 16, 8, False)]
    )
    out += _conv2d_cases(8, 384, 128, 128, 7, torch.float16, cl, f"≥ 1× ({ncl})", dev, [(64, 8, 8, 4, False)])
    # Blur forms: (BLOCK_C, ROWS, BLOCK_W, num_warps[, band unrolled]) of the fused stencil (5×5: the looped
    # band, the default before the unrolled one, and unrolled tiles), (BH, BW, BU, BV, num_warps) of the
    # tensor-core form (opt-in). Not (64, 128, 16, 16, 8): it faulted (illegal address) on the H200 under
    # triton 3.6, which poisons the process's CUDA context and every later row.
    tc = "tensor-core"
    # Ring variants ("ring", CYCLES, BLOCK_W, num_warps) of _ring_kernel (NCHW, stride 1, the default for
    # the 5×5 blur and the NCHW rows; _ring_config's even split of the rows); the band kernels it
    # replaced as the comparison. 31×31: ("long", BLOCK_W, num_warps, registers, edge registers,
    # programs) of _long_rows_kernel (BLOCK_W / (32·num_warps) columns per thread; programs None: as
    # many as the GPU holds at those registers), and the ring's strided-rows path.
    out += _blur_case(
        5, 1.5, separable_baseline=False, target="≥ 5×", dev=dev,
        forms=[("fused", (1, 4, 256, 4, True)), ("fused", ("ring", 11, 128, 2))],
    )  # fmt: skip
    out += _blur_case(
        31, 5.0, separable_baseline=True, target="≥ 10×", dev=dev,
        forms=[(tc, (64, 32, 64, 16, 4)), ("taps in registers", None), ("fused", ("ring", 5, 128, 2)),
               ("fused", ("long", 128, 1, 168, 255, None)), ("fused", ("long", 128, 1, 255, 255, None)),
               ("fused", ("long", 128, 1, 232, 255, 2112)), ("fused", ("long", 256, 2, 232, 255, None)),
               ("prefetch", (0, None)), ("prefetch", (8, None))],
    )  # fmt: skip
    out += _conv2d_cases(
        *big, 3, torch.float32, "nchw", "≥ 3.5×", dev,
        [(1, 4, 512, 4, True), ("ring", 8, 512, 4), ("ring", 30, 512, 8), ("ring", 8, 512, 8)],
    )  # fmt: skip
    ring7 = [
        (1, 8, 512, 4, False),
        ("ring", 14, 256, 4),
        ("ring", 20, 512, 8),
        ("ring", 74, 512, 8),
        ("ring", 38, 512, 16),
    ]
    out += _conv2d_cases(*big, 7, torch.float32, "nchw", "≥ 8×", dev, ring7)
    out += _conv2d_cases(*big, 7, torch.float16, "nchw", "≥ 10×", dev, ring7)
    out += _conv2d_cases(
        8, 384, 128, 128, 7, torch.float16, "nchw", "≥ 4×", dev,
        [(1, 8, 128, 4, False), ("ring", 10, 128, 2), ("ring", 10, 128, 4)],
    )  # fmt: skip
    out.append(_fir_case(129, path="tensor-core", target="≥ 6×", dev=dev, quick=quick))
    # _TOEPLITZ_TILE variants: (R, T, BU, num_warps).
    for tile in ((128, 128, 32, 8), (64, 64, 32, 4), (128, 64, 32, 8), (64, 128, 64, 8), (256, 32, 32, 8),
                 (128, 32, 32, 4)):  # fmt: skip
        out.append(_fir_case(129, path="tensor-core", target="", dev=dev, quick=quick, tile=tile))
    if not quick:
        out.append(_fir_case(129, path="direct", target="crossover", dev=dev, quick=quick))
        out.append(_fir_case(33, path="direct", target="crossover", dev=dev, quick=quick))
        out.append(_fir_case(65, path="tensor-core", target="crossover", dev=dev, quick=quick))
        out.append(_fir_case(65, path="direct", target="crossover", dev=dev, quick=quick))

    # Bank of 64 filters on one channel (filter_bank's form: channel multiplier 64).
    b = 8 if quick else 32
    g = torch.Generator(device=dev).manual_seed(4)
    s = torch.randn(b, 1, 160000, device=dev, generator=g)
    bank = torch.randn(64, 129, device=dev, generator=g) / 12
    ref = F.conv1d(s[:1].double(), bank.double()[:, None], padding=64)

    def bank_run():
        return nf.depthwise_conv1d(s, bank, backend="triton")

    out.append(
        Case(
            name=f"bank 1→64 filters fp32 {b}×160000, 129 taps",
            run=bank_run,
            baseline=lambda: F.conv1d(s, bank[:, None], padding=64),
            bytes_moved=(s.numel() + s.numel() * 64) * 4,
            target="≥ 6×",
            check=lambda: _rel(bank_run()[:1], ref),
        )
    )
    # _BANK_TILE variants: (BL, BK, num_warps).
    for tile in ((256, 32, 8), (128, 64, 8), (64, 32, 4), (128, 32, 4), (256, 64, 8)):
        run = _patched("_BANK_TILE", tile, bank_run)
        out.append(
            Case(
                name=f"bank 1→64 filters fp32 {b}×160000, 129 taps tile {tile} (variant)",
                run=run,
                bytes_moved=(s.numel() + s.numel() * 64) * 4,
                check=lambda run=run: _rel(run()[:1], ref),
            )
        )
    for orig, new in ((44100, 16000), (16000, 44100), (48000, 22050)):
        out.append(_resample_case(orig, new, dev, quick))
        # The tensor-core kernel (opt-in), _RESAMPLE_TILE variants: (BL, BN, BU, num_warps).
        for tile in ((64, 32, 32, 4), (128, 32, 32, 4), (32, 32, 32, 4), (64, 16, 16, 4), (64, 64, 32, 4),
                     (128, 64, 32, 8)):  # fmt: skip
            out.append(_resample_case(orig, new, dev, quick, tile=tile))
    return out


def main(argv: list[str] | None = None) -> None:
    """``python -m nbxsig.bench.filters [--match TEXT ...] [--warm I/N] [--markdown FILE]``: the suite's
    cases whose name contains any ``--match`` text, each row printed (and appended to ``--markdown``) as it
    finishes, so a time limit or a device fault loses only the rows after it; run groups in separate
    processes to isolate a fault (it poisons the process's CUDA context). ``--warm I/N`` only runs every
    N-th matching case once, from the I-th (compiles into Triton's on-disk cache; run N in parallel first)."""
    import argparse

    from ._harness import Environment, copy_bandwidth_gbps, format_environment, format_table, measure

    parser = argparse.ArgumentParser(prog="python -m nbxsig.bench.filters", description=main.__doc__)
    parser.add_argument("--match", nargs="*", default=[""], help="substrings of case names (default: all)")
    parser.add_argument("--warm", help="I/N: compile every N-th matching case from the I-th, time nothing")
    parser.add_argument("--markdown", help="append the rows to this file")
    args = parser.parse_args(argv)
    selected = [c for c in cases() if any(m in c.name for m in args.match)]
    dev = torch.device("cuda")
    if args.warm:
        i, n = map(int, args.warm.split("/"))
        for c in selected[i::n]:
            c.run()
            torch.cuda.synchronize(dev)
            print(f"warm: {c.name}", flush=True)
        return
    copy_gbps = copy_bandwidth_gbps(dev)
    env = format_environment(Environment.capture(dev, copy_gbps))

    def emit(text: str) -> None:
        print(text, flush=True)
        if args.markdown:
            with open(args.markdown, "a", encoding="utf-8") as f:
                f.write(text + "\n")

    emit(f"Environment: {env}\n\n{format_table([])}")
    for c in selected:
        emit(format_table([measure(c, device=dev, copy_gbps=copy_gbps)]).splitlines()[-1])


if __name__ == "__main__":
    main()
