"""Filter benchmarks: depthwise 2-D (NCHW and channels_last), long 1-D FIR, filter banks, resampling and
the kornia-style blurs, each against torch (cuDNN) / torchaudio in the same process.

Baselines: ``F.conv2d``/``F.conv1d`` with ``groups=C`` (what a torch user writes); torchaudio's
``resample`` when torchaudio is importable, else nbxsig's torch backend (torchaudio's algorithm with the
bank cached, i.e. a slightly faster baseline); kornia is not on the GPU machine, so the blurs compare
against ``F.pad`` + ``F.conv2d`` (separable for the 31×31 Gaussian), the issue's second baseline.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import filters as nf
from ..kernels import depthwise as dk
from ._harness import Case


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm()).item()


def _conv2d_cases(n, c, h, w, k, dtype, layout, target, dev) -> Case:
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(n, c, h, w, device=dev, dtype=torch.float32, generator=g).to(dtype)
    if layout == "channels_last":
        x = x.to(memory_format=torch.channels_last)
    wt = torch.randn(c, k, k, device=dev, generator=g) / k
    w_torch = wt.to(dtype)[:, None]
    name = f"depthwise2d {str(dtype)[6:]} {layout} {n}×{c}×{h}×{w} k={k}"

    def check() -> float:
        ref = F.conv2d(x[:1].double(), wt.double()[:, None], padding=k // 2, groups=c)
        return _rel(nf.depthwise_conv2d(x[:1], wt, backend="triton"), ref)

    return Case(
        name=name,
        run=lambda: nf.depthwise_conv2d(x, wt, backend="triton"),
        baseline=lambda: F.conv2d(x, w_torch, padding=k // 2, groups=c),
        bytes_moved=2 * x.numel() * x.element_size(),
        target=target,
        check=check,
    )


def _fir_case(k: int, *, path: str, target: str, dev, quick: bool) -> Case:
    b, c, n = (8, 64, 160000) if quick else (32, 64, 160000)
    g = torch.Generator(device=dev).manual_seed(1)
    x = torch.randn(b, c, n, device=dev, generator=g)
    w = torch.randn(c, k, device=dev, generator=g) / k**0.5

    def run():
        if path == "direct":  # force the direct stencil, to measure the crossover
            saved, dk._DOT_MIN_TAPS = dk._DOT_MIN_TAPS, 1 << 30
            try:
                return nf.depthwise_conv1d(x, w, backend="triton")
            finally:
                dk._DOT_MIN_TAPS = saved
        return nf.depthwise_conv1d(x, w, backend="triton")

    return Case(
        name=f"1-D FIR fp32 {b}×{c}×{n}, {k} taps ({path})",
        run=run,
        baseline=lambda: F.conv1d(x, w[:, None], padding=k // 2, groups=c),
        bytes_moved=2 * x.numel() * 4,
        target=target,
        check=lambda: _rel(
            run()[:1], F.conv1d(x[:1].double(), w.double()[:, None], padding=k // 2, groups=c)
        ),
    )


def _resample_case(orig: int, new: int, dev, quick: bool) -> Case:
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
    return Case(
        name=f"resample {orig}→{new}, {b}×10 s",
        run=lambda: nf.resample(x, orig, new, backend="triton"),
        baseline=baseline,
        bytes_moved=(x.numel() + b * out_len) * 4,
        target="≥ 8×",
        check=lambda: _rel(
            nf.resample(x[:2], orig, new, backend="triton"), nf.resample(x[:2].double(), orig, new)
        ),
        notes=f"baseline: {who}",
    )


def _blur_case(k: int, sigma: float, *, separable_baseline: bool, target: str, dev) -> Case:
    g = torch.Generator(device=dev).manual_seed(3)
    x = torch.rand(8, 3, 2048, 2048, device=dev, generator=g)
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

    return Case(
        name=f"gaussian_blur2d {k}×{k} reflect fp32 8×3×2048×2048",
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


def cases(*, quick: bool = False) -> list[Case]:
    dev = torch.device("cuda")
    big = (8, 64, 512, 512) if quick else (32, 64, 512, 512)
    out = []
    for layout in ("nchw", "channels_last"):
        tgt = (lambda t: t) if layout == "nchw" else (lambda t: "≥ 1× (never slower)")
        out.append(_conv2d_cases(*big, 3, torch.float32, layout, tgt("≥ 3.5×"), dev))
        out.append(_conv2d_cases(*big, 7, torch.float32, layout, tgt("≥ 8×"), dev))
        out.append(_conv2d_cases(*big, 7, torch.float16, layout, tgt("≥ 10×"), dev))
        out.append(_conv2d_cases(8, 384, 128, 128, 7, torch.float16, layout, tgt("≥ 4×"), dev))
    out.append(_fir_case(129, path="tensor-core", target="≥ 6×", dev=dev, quick=quick))
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
    out.append(
        Case(
            name=f"bank 1→64 filters fp32 {b}×160000, 129 taps",
            run=lambda: nf.depthwise_conv1d(s, bank, backend="triton"),
            baseline=lambda: F.conv1d(s, bank[:, None], padding=64),
            bytes_moved=(s.numel() + s.numel() * 64) * 4,
            target="≥ 6×",
            check=lambda: _rel(
                nf.depthwise_conv1d(s[:1], bank, backend="triton"),
                F.conv1d(s[:1].double(), bank.double()[:, None], padding=64),
            ),
        )
    )
    for orig, new in ((44100, 16000), (16000, 44100), (48000, 22050)):
        out.append(_resample_case(orig, new, dev, quick))
    out.append(_blur_case(31, 5.0, separable_baseline=True, target="≥ 10×", dev=dev))
    out.append(_blur_case(5, 1.5, separable_baseline=False, target="≥ 5×", dev=dev))
    return out
