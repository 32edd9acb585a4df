"""Tile-config sweep of the fused mel kernel (a tuning tool, not a ``nbxsig bench`` suite).

``python -m nbxsig.bench.mel_sweep [--jobs 8]`` on a GPU: compiles every candidate config of the
interior launch for TF32 ("high") and 3xTF32 ("highest") in parallel worker processes (Triton's
on-disk cache is shared, so the timing process then only loads them), then times each one on the
issue's case (MelSpectrogram 16 kHz, n_fft 400, hop 160, 80 mels, 64 × 30 s fp32) with
``triton.testing.do_bench`` (median), next to torchaudio's recipe and the unfused path
(``nbxsig.stft.spectrogram`` + a mel matmul), with each one's relative error against a float64
oracle on the first 8 signals. Prints one table; the config list in ``nbxsig.kernels.mel`` and the
numbers in docs/features.md come from its output.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp

import torch

CANDIDATES = [
    dict(BLOCK_T=64, BLOCK_F=128, BLOCK_K=16, num_warps=8, num_stages=2),
    dict(BLOCK_T=64, BLOCK_F=128, BLOCK_K=16, num_warps=8, num_stages=3),
    dict(BLOCK_T=128, BLOCK_F=128, BLOCK_K=16, num_warps=8, num_stages=2),
    dict(BLOCK_T=128, BLOCK_F=64, BLOCK_K=16, num_warps=8, num_stages=2),
    dict(BLOCK_T=128, BLOCK_F=64, BLOCK_K=16, num_warps=4, num_stages=2),
    dict(BLOCK_T=64, BLOCK_F=64, BLOCK_K=16, num_warps=4, num_stages=2),
    dict(BLOCK_T=64, BLOCK_F=64, BLOCK_K=16, num_warps=4, num_stages=3),
    dict(BLOCK_T=64, BLOCK_F=32, BLOCK_K=16, num_warps=4, num_stages=3),
    dict(BLOCK_T=64, BLOCK_F=128, BLOCK_K=32, num_warps=8, num_stages=2),
    dict(BLOCK_T=128, BLOCK_F=128, BLOCK_K=32, num_warps=8, num_stages=2),
]
PRECISIONS = ("tf32", "tf32x3")


def _operands(device):
    from .. import features as nf

    window = nf.prepare_window(None, 400, 400, device)
    filters = nf.mel_filterbank(201, 0.0, 8000.0, 80, 16000, dtype=torch.float64, device=device)
    return window, filters


def _mel(x, window, filters, precision, config):
    from ..kernels import mel as kmel

    return kmel.mel_spectrogram(
        x, n_fft=400, hop_length=160, window=window, filters=filters, power=2.0, scale=1.0,
        center=True, pad_mode="reflect", _precision=precision, _config=config,
    )  # fmt: skip


def _compile(jobs: list[tuple[str, dict]]) -> None:
    device = torch.device("cuda")
    window, filters = _operands(device)
    x = torch.randn(2, 16000, device=device)
    for precision, config in jobs:
        _mel(x, window, filters, precision, config)
    torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--phase", choices=("compile", "time", "both"), default="both")
    args = parser.parse_args()
    import triton.testing

    from .. import stft as ns

    work = [(p, c) for c in CANDIDATES for p in PRECISIONS]
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_compile, args=(work[i :: args.jobs],)) for i in range(args.jobs)]
    for p in procs if args.phase != "time" else ():
        p.start()
    for p in procs if args.phase != "time" else ():
        p.join()
    if args.phase == "compile":
        return

    device = torch.device("cuda")
    window, filters = _operands(device)
    gen = torch.Generator(device="cpu").manual_seed(0)
    x = (0.1 * torch.randn(64, 16000 * 30, generator=gen)).to(device)
    sub = x[:8].double()
    w64 = torch.hann_window(400, dtype=torch.float64, device=device)
    spec64 = torch.stft(sub, 400, 160, window=w64, return_complex=True).abs() ** 2
    mel64 = (spec64.transpose(-1, -2) @ filters).transpose(-1, -2)
    fb32 = filters.float()
    hann = torch.hann_window(400, device=device)

    def rel(out):
        return ((out[:8].double() - mel64).norm() / mel64.norm()).item()

    def bench(fn):
        return 1e3 * triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")

    rows = []
    for precision, torch_precision in (("tf32", "high"), ("tf32x3", "highest")):
        torch.set_float32_matmul_precision(torch_precision)

        def recipe():
            spec = torch.stft(x, 400, 160, 400, hann, center=True, pad_mode="reflect", return_complex=True)
            return torch.matmul(spec.abs().pow(2.0).transpose(-1, -2), fb32).transpose(-1, -2)

        def unfused():
            spec = ns.spectrogram(x, 400, 160, window=hann, power=2.0, backend="triton")
            return torch.matmul(spec.transpose(-1, -2), fb32).transpose(-1, -2)

        paths = (("torchaudio recipe (torch.stft + matmul)", recipe), ("nbxsig.stft + matmul", unfused))
        for name, fn in paths:
            try:
                rows.append((torch_precision, name, bench(fn), rel(fn())))
            except Exception as err:  # one failing row must not cost the others
                rows.append((torch_precision, f"{name}: {err!r}"[:120], float("nan"), float("nan")))
        for config in CANDIDATES:
            label = "fused T{BLOCK_T} F{BLOCK_F} K{BLOCK_K} w{num_warps} s{num_stages}".format(**config)
            try:
                fn = lambda c=config, p=precision: _mel(x, window, filters, p, c)  # noqa: E731
                rows.append((torch_precision, label, bench(fn), rel(fn())))
            except Exception as err:
                rows.append((torch_precision, f"{label}: {err!r}"[:120], float("nan"), float("nan")))
        torch.cuda.empty_cache()
    print(f"\nGPU: {torch.cuda.get_device_name()}; torch {torch.__version__}; 64 x 30 s fp32, 80 mels")
    print("| precision | path | µs | rel. error |\n|---|---|---:|---:|")
    for precision, name, us, err in rows:
        print(f"| {precision} | {name} | {us:.1f} | {err:.2e} |")


if __name__ == "__main__":
    main()
