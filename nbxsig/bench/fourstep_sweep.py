"""Launch-config sweep of the four-step kernel, plus selected benchmark rows (a tuning tool, not a
``nbxsig bench`` suite).

``python -m nbxsig.bench.fourstep_sweep [--jobs 12] [--rows SUBSTRING ...]`` on a GPU: compiles
every candidate launch config (``BLOCK_T``, warps, stages) of :mod:`nbxsig.kernels.fourstep` for the
power spectrogram (n_fft 400, hop 160, 64 × 160000) and MelSpectrogram (n_fft 400, hop 160, 80
mels, 64 × 30 s) at the stage precisions given (default: the fp16 stages; the mel epilogue takes
"tf32" and "tf32x3"), in parallel worker processes (Triton's on-disk cache is shared), then times
each with ``triton.testing.do_bench`` (median) next to torch's recipe, with the relative error
against a float64 oracle on the first 8 signals. ``--rows`` then measures the rows of the
``spectral`` and ``features`` suites whose names contain any of the substrings, with the suites' own
harness (torch/torchaudio in the same process).

``--phase stft-compile`` / ``stft`` sweep the complex-output mode (:func:`nbxsig.kernels.fourstep.stft`)
over factorisations (``N1``), tiles and store layouts for the issue #3 stft rows
(n_fft 400, 512, 1000, 2048) and the n_fft 400 and 512 power spectrograms (512's plan changed with
the Nyquist split), each next to torch.stft and nbxsig's FFT path in the same process, with the relative
error against float64 torch.stft and the extra device memory of the default candidate.
"""

from __future__ import annotations

import argparse
import importlib
import multiprocessing as mp
import time

import torch

CANDIDATES = [
    dict(BLOCK_T=8, num_warps=2, num_stages=1),
    dict(BLOCK_T=8, num_warps=4, num_stages=1),
    dict(BLOCK_T=16, num_warps=2, num_stages=1),
    dict(BLOCK_T=16, num_warps=4, num_stages=1),
    dict(BLOCK_T=16, num_warps=8, num_stages=1),
    dict(BLOCK_T=32, num_warps=4, num_stages=1),
    dict(BLOCK_T=32, num_warps=8, num_stages=1),
    dict(BLOCK_T=16, num_warps=4, num_stages=1, PERMUTE_STORE=False),
    dict(BLOCK_T=8, num_warps=4, num_stages=1, PERMUTE_STORE=False),
]
#: Stage operand formats: the defaults ("fp16" for "high", "fp16x3" for "highest"), TF32 ones (the mel
#: epilogue's) and "ieee" (CUDA-core FMA; spectrogram only).
PRECISIONS = ("fp16", "fp16x3", "tf32", "tf32x3", "ieee")


def _torch_precision(precision: str) -> str:
    """The torch matmul setting a stage precision serves (for the baseline's own TF32 use)."""
    return "high" if precision in ("fp16", "tf32") else "highest"


KINDS = ("spectrogram", "mel")


def _fits(kind: str, config: dict, precision: str = "tf32") -> bool:
    if kind == "spectrogram":
        return True
    if "PERMUTE_STORE" in config:  # a spectrogram-only switch
        return False
    # The mel dot's M is BLOCK_T (>= 16); its epilogue takes TF32 operands only.
    return config["BLOCK_T"] >= 16 and precision.startswith("tf32")


def _operands(device):
    from .. import features as nf

    window = nf.prepare_window(None, 400, 400, device)
    filters = nf.mel_filterbank(201, 0.0, 8000.0, 80, 16000, dtype=torch.float64, device=device)
    return window, filters


def _call(kind, x, window, filters, precision, config):
    from ..kernels import fourstep

    common = dict(center=True, pad_mode="reflect", scale=1.0, power=2.0, _precision=precision, _config=config)
    if kind == "spectrogram":
        return fourstep.spectrogram(x, n_fft=400, hop=160, window=window, **common)
    return fourstep.mel_spectrogram(
        x, n_fft=400, hop_length=160, window=window, filters=filters, floor=None, log=None, drop_last=False,
        whisper=False, **common,
    )  # fmt: skip


def _compile(jobs: list[tuple[str, str, dict]]) -> None:
    device = torch.device("cuda")
    window, filters = _operands(device)
    x = torch.randn(2, 16000, device=device)
    for kind, precision, config in jobs:
        try:
            _call(kind, x, window, filters, precision, config)
        except Exception as err:  # reported again (with the timing) by the main process
            print(f"compile {kind} {precision} {config}: {err!r}"[:300], flush=True)
    torch.cuda.synchronize()


def _sweep(tag: str, precisions: list[str]) -> None:
    import triton.testing

    def bench(fn):
        return 1e3 * triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")

    device = torch.device("cuda")
    window, filters = _operands(device)
    window32 = window.float()
    gen = torch.Generator(device="cpu").manual_seed(0)
    hann64 = torch.hann_window(400, dtype=torch.float64, device=device)
    inputs = {
        "spectrogram": torch.randn(64, 160000, generator=gen).to(device),
        "mel": (0.1 * torch.randn(64, 16000 * 30, generator=gen)).to(device),
    }
    rows = []
    for kind in KINDS:
        x = inputs[kind]
        spec64 = torch.stft(x[:8].double(), 400, 160, window=hann64, return_complex=True).abs() ** 2
        ref = spec64 if kind == "spectrogram" else (spec64.transpose(-1, -2) @ filters).transpose(-1, -2)
        del spec64
        fb32 = filters.float()

        def torch_recipe(x=x, kind=kind, fb32=fb32):
            spec = torch.stft(x, 400, 160, window=window32, return_complex=True).abs().pow(2)
            return (
                spec
                if kind == "spectrogram"
                else torch.matmul(spec.transpose(-1, -2), fb32).transpose(-1, -2)
            )

        for precision in precisions:
            torch_precision = _torch_precision(precision)
            torch.set_float32_matmul_precision(torch_precision)
            rows.append((kind, torch_precision, "torch recipe", bench(torch_recipe), float("nan")))
            for config in (c for c in CANDIDATES if _fits(kind, c, precision)):
                label = f"{precision} " + "T{BLOCK_T} w{num_warps} s{num_stages}".format(**config)
                label += "" if config.get("PERMUTE_STORE", True) else " (k1-row stores)"
                fn = lambda c=config, p=precision, k=kind, x=x: _call(k, x, window, filters, p, c)  # noqa: E731
                try:
                    out = fn()[:8].double()
                    rows.append(
                        (kind, torch_precision, label, bench(fn), ((out - ref).norm() / ref.norm()).item())
                    )
                except Exception as err:  # one failing config must not cost the others
                    rows.append(
                        (kind, torch_precision, f"{label}: {err!r}"[:150], float("nan"), float("nan"))
                    )
            torch.set_float32_matmul_precision("highest")
        del ref
        torch.cuda.empty_cache()
    print(f"\nGPU: {torch.cuda.get_device_name()}; torch {torch.__version__}; {tag}")
    print("| kind | precision | config | µs | rel. error |\n|---|---|---|---:|---:|")
    for kind, precision, name, us, err in rows:
        print(f"| {kind} | {precision} | {name} | {us:.1f} | {err:.2e} |", flush=True)


def _rows(substrings: list[str], skip: list[str], markdown: str | None) -> None:
    from ._harness import Environment, copy_bandwidth_gbps, format_environment, format_table, measure

    device = torch.device("cuda")
    copy_gbps = copy_bandwidth_gbps(device)
    sections = [f"Environment: {format_environment(Environment.capture(device, copy_gbps))}"]
    for suite in ("spectral", "features"):
        module = importlib.import_module(f"nbxsig.bench.{suite}")
        results = []
        for case in module.cases():
            label = case.name + case.notes
            if any(s in label for s in substrings) and not any(s in label for s in skip):
                try:
                    results.append(measure(case, device=device, copy_gbps=copy_gbps))
                except Exception as err:  # one failing row must not cost the others
                    print(f"{case.name}: {err!r}"[:300], flush=True)
        sections.append(f"### {suite} (selected rows)\n\n{format_table(results)}")
        print(sections[-1], flush=True)
    if markdown:
        with open(markdown, "w", encoding="utf-8") as f:
            f.write("\n\n".join(sections) + "\n")


#: (kind, n_fft, hop, batch, length) of the complex-mode sweep.
STFT_ROWS = [
    ("stft", 400, 160, 64, 160000),
    ("stft", 512, 128, 64, 160000),
    ("spectrogram", 400, 160, 64, 160000),
    ("spectrogram", 512, 128, 64, 160000),
    ("stft", 1000, 250, 16, 480000),
    ("stft", 2048, 512, 16, 1323000),
]
STFT_PRECISIONS = ("fp16x3", "fp16")


def _stft_candidates(kind: str, n_fft: int, precision: str) -> list[dict]:
    one = dict(num_stages=1)
    if n_fft > 512:
        tiles = [(2, 4), (4, 4), (4, 8), (8, 8)]
        out = [dict(BLOCK_T=t, num_warps=w, PERMUTE_STORE=False, **one) for t, w in tiles]
        return [*out, dict(BLOCK_T=4, num_warps=8, PERMUTE_STORE=True, **one)]
    plans = {400: (16, 25), 512: (16, 32)}[n_fft]  # N1 of plan's pick first
    if kind == "spectrogram":
        return [
            dict(N1=n1, BLOCK_T=t, num_warps=w, **one) for n1 in plans for t, w in ((8, 4), (16, 8), (4, 4))
        ]
    tiles = [(8, 4), (8, 2), (16, 4), (16, 8), (4, 4)] + ([(32, 8)] if precision == "fp16" else [])
    return [
        dict(N1=n1, BLOCK_T=t, num_warps=w, PERMUTE_STORE=p, **one)
        for n1 in plans
        for t, w in tiles
        for p in (True, False)
    ]


def _stft_call(kind, x, n_fft, hop, window, precision, config):
    from ..kernels import fourstep

    common = dict(center=True, pad_mode="reflect", scale=1.0, _precision=precision, _config=config)
    if kind == "spectrogram":
        return fourstep.spectrogram(x, n_fft=n_fft, hop=hop, window=window, power=2.0, **common)
    return fourstep.stft(x, n_fft=n_fft, hop=hop, window=window, **common)


def _stft_jobs() -> list[tuple]:
    return [
        (row, precision, config)
        for row in STFT_ROWS
        for precision in STFT_PRECISIONS
        for config in _stft_candidates(row[0], row[1], precision)
    ]


def _stft_compile(jobs: list[tuple]) -> None:
    device = torch.device("cuda")
    for (kind, n_fft, hop, _, length), precision, config in jobs:
        # The row's own length (Triton specializes on divisibility), two signals.
        x = torch.randn(2, length, device=device)
        window = torch.hann_window(n_fft, device=device)
        try:
            _stft_call(kind, x, n_fft, hop, window, precision, config)
        except Exception as err:  # reported again (with the timing) by the main process
            print(f"compile {kind} {n_fft} {precision} {config}: {err!r}"[:300], flush=True)
    torch.cuda.synchronize()


def _line(*cells) -> None:
    print("| " + " | ".join(str(c) for c in cells) + " |", flush=True)


def _stft_sweep(tag: str) -> None:
    from .. import stft as S
    from ..kernels import fourstep
    from ._harness import peak_extra_mb, time_us

    device = torch.device("cuda")
    print(f"\nGPU: {torch.cuda.get_device_name()}; torch {torch.__version__}; {tag}")
    _line("row", "precision", "variant", "µs", "torch µs", "speedup", "rel. error", "extra MB")
    _line("---", "---", "---", "---:", "---:", "---:", "---:", "---:")
    for kind, n_fft, hop, batch, length in STFT_ROWS:
        gen = torch.Generator(device="cpu").manual_seed(0)
        x = torch.randn(batch, length, generator=gen).to(device)
        window = torch.hann_window(n_fft, device=device)
        ref = torch.stft(x[:4].double(), n_fft, hop, window=window.double(), return_complex=True)
        ref = ref.abs() ** 2 if kind == "spectrogram" else torch.view_as_real(ref)
        label = f"{kind} {n_fft}/{hop} {batch}×{length}"

        def rel(out, ref=ref):
            out = torch.view_as_real(out) if out.is_complex() else out
            return f"{((out[:4].double() - ref).norm() / ref.norm()).item():.1e}"

        def public(x=x, n_fft=n_fft, hop=hop, window=window, kind=kind):
            if kind == "spectrogram":
                return S.spectrogram(x, n_fft, hop, window=window)
            return S.stft(x, n_fft, hop, window=window)

        def torch_fn(x=x, n_fft=n_fft, hop=hop, window=window, kind=kind):
            spec = torch.stft(x, n_fft, hop, window=window, return_complex=True)
            return spec.abs().pow(2) if kind == "spectrogram" else spec

        switch = "SPECTROGRAM_AUTO" if kind == "spectrogram" else "STFT_AUTO"
        for precision in STFT_PRECISIONS:
            torch.set_float32_matmul_precision(_torch_precision(precision))
            base = time_us(torch_fn)
            _line(label, precision, "torch", f"{base:.1f}", f"{base:.1f}", "1.00×", "", "")
            paths = (("nbxsig auto", None), ("nbxsig fft path", False), ("nbxsig four-step default", True))
            for name, setting in paths:
                saved = getattr(fourstep, switch)
                setattr(fourstep, switch, setting)
                try:
                    us = time_us(public)
                    err, mb = rel(public()), peak_extra_mb(public, device)
                    _line(
                        label,
                        precision,
                        name,
                        f"{us:.1f}",
                        f"{base:.1f}",
                        f"{base / us:.2f}×",
                        err,
                        f"{mb:.1f}",
                    )
                except Exception as e:  # one failing variant must not cost the others
                    _line(label, precision, f"{name}: {e!r}"[:200], "", "", "", "", "")
                finally:
                    setattr(fourstep, switch, saved)
            for config in _stft_candidates(kind, n_fft, precision):
                name = " ".join(f"{k}={v}" for k, v in config.items() if k != "num_stages")

                def fn(c=config, p=precision, k=kind, x=x, n=n_fft, h=hop, w=window):
                    return _stft_call(k, x, n, h, w, p, c)

                try:
                    us = time_us(fn, warmup_ms=10, rep_ms=40)
                    out = fn()
                    out = torch.view_as_complex(out) if kind == "stft" else out
                    _line(
                        label, precision, name, f"{us:.1f}", f"{base:.1f}", f"{base / us:.2f}×", rel(out), ""
                    )
                except Exception as e:  # one failing config must not cost the others
                    _line(label, precision, f"{name}: {e!r}"[:200], "", "", "", "", "")
        torch.set_float32_matmul_precision("highest")
        del x, ref
        torch.cuda.empty_cache()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=12)
    parser.add_argument("--deadline", type=float, default=600.0, help="seconds for --phase stft-compile")
    parser.add_argument(
        "--phase", choices=("compile", "sweep", "rows", "all", "stft-compile", "stft"), default="all"
    )
    parser.add_argument("--rows", nargs="*", default=[], help="substrings of the suite rows to measure")
    parser.add_argument("--precisions", nargs="*", default=["fp16", "fp16x3"], choices=PRECISIONS)
    parser.add_argument("--tag", default="", help="a label for the sweep's table (e.g. the environment)")
    parser.add_argument("--skip", nargs="*", default=[], help="substrings of rows to leave out")
    parser.add_argument("--markdown", help="write the selected rows' tables to this file")
    args = parser.parse_args()
    if args.phase == "stft-compile":
        # Workers compile into Triton's on-disk cache; any still compiling at the deadline are
        # stopped (the sweep then compiles what is missing itself).
        work = _stft_jobs()
        ctx = mp.get_context("spawn")
        procs = [ctx.Process(target=_stft_compile, args=(work[i :: args.jobs],)) for i in range(args.jobs)]
        deadline = time.monotonic() + args.deadline
        for p in procs:
            p.start()
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.terminate()
                print(f"compile worker {p.pid} stopped at the deadline", flush=True)
    if args.phase == "stft":
        _stft_sweep(args.tag)
    if args.phase in ("compile", "all"):
        work = [(k, p, c) for c in CANDIDATES for p in args.precisions for k in KINDS if _fits(k, c, p)]
        ctx = mp.get_context("spawn")
        procs = [ctx.Process(target=_compile, args=(work[i :: args.jobs],)) for i in range(args.jobs)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
    if args.phase in ("sweep", "all"):
        _sweep(args.tag, args.precisions)
    if args.phase in ("rows", "all") and args.rows:
        _rows(args.rows, args.skip, args.markdown)


if __name__ == "__main__":
    main()
