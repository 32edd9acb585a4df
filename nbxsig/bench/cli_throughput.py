"""Throughput of ``nbxsig mel`` over a folder of many files, against a plain per-file loop.

``python -m nbxsig.bench.cli_throughput [--files 2000] [--seconds 10] [--dir DIR] [--markdown FILE]``

Generates ``--files`` mono 16 kHz PCM_16 WAV files of ``--seconds`` each (with the standard library,
once; a second run reuses them), then times on the CUDA device:

* **loop**: for each file, decode (soundfile, or nbxsig.io's standard-library WAV reader where
  soundfile is missing), move to the GPU, ``torchaudio.transforms.MelSpectrogram(16000, n_fft=400,
  hop_length=160, n_mels=80)``, copy back, ``np.save``; the decode / GPU / write split is measured
  with synchronisation after each step;
* **nbxsig mel**: ``nbxsig mel DIR -o OUT --device cuda -j JOBS --batch-size B -v`` as a subprocess
  (decode in worker processes, similar-length files batched on the GPU, atomic writes); its own
  summary gives the decode / device / write split; GPU utilisation is sampled with ``nvidia-smi``
  every 100 ms while it runs (when nvidia-smi exists).

Reports files/s, audio-hours/s, the time split and GPU busy %, checks that both produce the same
features (relative error on a few files), and prints a Markdown table (also written to
``--markdown``). The issue's target: nbxsig ≥ 5× the loop, GPU busy ≥ 50% of the wall time.

Not a ``Case`` suite (it times whole programs, not kernels), so ``nbxsig bench all`` does not run it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import wave
from pathlib import Path

import numpy as np

RATE = 16000


def generate(folder: Path, *, files: int, seconds: float) -> None:
    """Deterministic speech-band noise with a chirp, ``files`` WAVs in 20 subfolders."""
    n = int(seconds * RATE)
    marker = folder / f".complete-{files}x{seconds}"
    if marker.exists():
        return
    shutil.rmtree(folder, ignore_errors=True)
    rng = np.random.default_rng(2026)
    t = np.arange(n) / RATE
    for i in range(files):
        sub = folder / f"spk{i % 20:02d}"
        sub.mkdir(parents=True, exist_ok=True)
        x = 0.05 * rng.standard_normal(n) + 0.3 * np.sin(2 * np.pi * (200 + 20 * (i % 50)) * t * (1 + t / 20))
        pcm = np.clip(np.round(x * 32767), -32768, 32767).astype("<i2")
        with wave.open(str(sub / f"utt{i:05d}.wav"), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(RATE)
            w.writeframes(pcm.tobytes())
    marker.write_text("ok\n")


def _decoder():
    try:
        import soundfile

        def read(path: Path) -> np.ndarray:
            return soundfile.read(str(path), dtype="float32", always_2d=True)[0].T

        return read, "soundfile"
    except ImportError:
        from nbxsig import io as nio

        return (lambda path: nio.read_audio(path).data), "stdlib wave (no soundfile here)"


def run_loop(paths: list[Path], out: Path, device) -> dict[str, float]:
    """The plain loop a user would write."""
    import torch

    read, decoder = _decoder()
    mel = _baseline_mel(device)
    out.mkdir(parents=True, exist_ok=True)
    dec = gpu = wr = 0.0
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for i, p in enumerate(paths):
        t0 = time.perf_counter()
        x = read(p)
        t1 = time.perf_counter()
        y = mel(torch.from_numpy(x).to(device)).cpu().numpy()  # .cpu() synchronises
        t2 = time.perf_counter()
        np.save(out / f"{i:05d}.npy", y)
        t3 = time.perf_counter()
        dec, gpu, wr = dec + t1 - t0, gpu + t2 - t1, wr + t3 - t2
    wall = time.perf_counter() - start
    return {"wall": wall, "decode": dec, "gpu": gpu, "write": wr, "decoder": decoder}


def _baseline_mel(device):
    """torchaudio's MelSpectrogram; where torchaudio is missing, the same computation in plain torch
    (torch.stft + torchaudio's filter bank values from nbxsig.features.mel_filterbank)."""
    import torch

    try:
        import torchaudio

        return torchaudio.transforms.MelSpectrogram(RATE, n_fft=400, hop_length=160, n_mels=80).to(device)
    except ImportError:
        from nbxsig.features import mel_filterbank

        fb = mel_filterbank(201, 0.0, RATE / 2, 80, RATE).to(device=device, dtype=torch.float32)
        window = torch.hann_window(400, device=device)

        def mel(x: torch.Tensor) -> torch.Tensor:
            spec = torch.stft(x, 400, 160, window=window, return_complex=True).abs().square()
            return (spec.transpose(-1, -2) @ fb).transpose(-1, -2)

        return mel


class _GpuSampler:
    """Mean GPU utilisation from ``nvidia-smi`` sampled every 100 ms (None where unavailable)."""

    def __init__(self, index: int) -> None:
        self.samples: list[float] = []
        self.proc = None
        if shutil.which("nvidia-smi"):
            cmd = [
                "nvidia-smi",
                "-i",
                str(index),
                "--query-gpu=utilization.gpu",
                "--format=csv,noheader,nounits",
            ]
            self.proc = subprocess.Popen([*cmd, "-lms", "100"], stdout=subprocess.PIPE, text=True)
            self.thread = threading.Thread(target=self._read, daemon=True)
            self.thread.start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                self.samples.append(float(line.strip()))

    def stop(self) -> float | None:
        if self.proc is None:
            return None
        self.proc.terminate()
        self.proc.wait()
        return sum(self.samples) / len(self.samples) if self.samples else None


def run_cli(
    folder: Path, out: Path, *, jobs: int, batch_size: int, device: str, env: dict[str, str] | None = None
) -> dict[str, float]:
    """``nbxsig mel`` as a user runs it; times from its -v summary plus the process's wall time."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "nbxsig.cli.main", "mel", str(folder), "-o", str(out), "--device", device]
    cmd += ["-j", str(jobs), "--batch-size", str(batch_size), "-v"]
    index = int(device.partition(":")[2] or 0)
    sampler = _GpuSampler(index) if device.startswith("cuda") else None
    start = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    process_wall = time.perf_counter() - start
    util = sampler.stop() if sampler is not None else None
    if res.returncode != 0:
        raise SystemExit(f"nbxsig mel failed ({res.returncode}):\n{res.stderr}")
    text = res.stderr
    num = r"([0-9.]+)"
    found = {
        "wall": re.search(rf"skipped in {num} s", text),
        "decode": re.search(rf"decode {num} s", text),
        "gpu": re.search(rf"device {num} s", text),
        "write": re.search(rf"write {num} s", text),
        "wait": re.search(rf"waiting for decode {num} s", text),
        "startup": re.search(rf"start-up {num} s", text),
        "stalled": re.search(rf"stalled {num} s", text),
    }
    out_stats = {k: float(m.group(1)) if m else float("nan") for k, m in found.items()}
    out_stats["process_wall"] = process_wall
    out_stats["util"] = util if util is not None else float("nan")
    out_stats["log"] = text.strip()
    return out_stats


def check(paths: list[Path], folder: Path, loop_out: Path, cli_out: Path) -> float:
    """Largest relative error (‖a−b‖/‖b‖) between the two outputs, on a few files."""
    worst = 0.0
    for i in (0, len(paths) // 2, len(paths) - 1):
        a = np.load(cli_out / paths[i].relative_to(folder).with_suffix(".npy")).astype(np.float64)
        b = np.load(loop_out / f"{i:05d}.npy").astype(np.float64)
        worst = max(worst, float(np.linalg.norm(a - b) / np.linalg.norm(b)))
    return worst


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(prog="python -m nbxsig.bench.cli_throughput", description=__doc__)
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--dir", default="/tmp/nbxsig-cli-throughput", help="where the WAVs and outputs go")
    parser.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1), help="nbxsig mel -j")
    parser.add_argument("--batch-size", type=int, default=64, help="nbxsig mel --batch-size")
    parser.add_argument("--device", default="cuda")
    parser.add_argument(
        "--no-cold",
        action="store_true",
        help="skip the run on an empty Triton cache (kernel compilation and autotuning included)",
    )
    parser.add_argument("--markdown", help="also write the table to this file")
    args = parser.parse_args(argv)

    import torch

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(
            "cli_throughput needs a CUDA device (or --device cpu for a dry run): torch sees none"
        )
    root = Path(args.dir)
    folder = root / "wav"
    t0 = time.perf_counter()
    generate(folder, files=args.files, seconds=args.seconds)
    print(f"{args.files} × {args.seconds:g} s WAVs ready in {time.perf_counter() - t0:.1f} s", flush=True)
    paths = sorted(folder.rglob("*.wav"))
    hours = len(paths) * args.seconds / 3600

    run_loop(paths[:8], root / "warmup", device)  # CUDA context, cuFFT plans, page cache
    loop = run_loop(paths, root / "loop", device)
    # The Triton cache of these runs only: "cold" starts from nothing, as on a fresh machine.
    cache = root / "triton-cache"
    env = {"TRITON_CACHE_DIR": str(cache)}
    common = dict(jobs=args.jobs, batch_size=args.batch_size, device=args.device)
    runs: list[tuple[str, dict, str]] = []
    if not args.no_cold:
        shutil.rmtree(cache, ignore_errors=True)
        cold = run_cli(folder, root / "cli-cold", env=env, **common)
        runs.append(("nbxsig mel, cold (empty Triton cache)", cold, "compiles + autotunes the mel kernel"))
    elif not cache.exists():
        run_cli(folder, root / "cli-prime", env=env, **common)  # fills the cache; not reported
    warm = run_cli(folder, root / "cli", env=env, **common)
    runs.append(("nbxsig mel (cached kernels)", warm, "atomic writes + fsync (default)"))
    nofsync = run_cli(folder, root / "cli-nofsync", env={**env, "NBXSIG_FSYNC": "0"}, **common)
    runs.append(("nbxsig mel, NBXSIG_FSYNC=0", nofsync, "atomic writes, no fsync (as the loop)"))
    err = max(check(paths, folder, root / "loop", root / name) for name in ("cli", "cli-nofsync"))

    def fmt(x: float) -> str:
        return "n/a" if x != x else (f"{x:.2f}" if x < 10 else f"{x:.1f}")

    gpu_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (dry run)"
    lines = [
        f"`nbxsig mel` vs a per-file loop: {len(paths)} × {args.seconds:g} s mono 16 kHz PCM_16 WAV "
        f"({hours:.2f} audio-hours), 80 mels, n_fft 400, hop 160, on {gpu_name}; "
        f"nbxsig -j {args.jobs} --batch-size {args.batch_size}; {os.cpu_count()} CPUs; loop decoder: "
        f"{loop['decoder']}. *run s*: nbxsig's own summary (inputs listed → last output written); "
        "*process s*: the whole `nbxsig` process (Python and torch imports, CUDA context, kernels).",
        "",
        "| method | run s | process s | files/s (run) | audio-h/s (run) | decode s | device s | write s "
        "| start-up s | GPU busy | notes |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        f"| loop: soundfile + torchaudio + np.save | {fmt(loop['wall'])} | – | "
        f"{len(paths) / loop['wall']:.0f} | {hours / loop['wall']:.3f} | {fmt(loop['decode'])} | "
        f"{fmt(loop['gpu'])} | {fmt(loop['write'])} | – (warmed up) | "
        f"{100 * loop['gpu'] / loop['wall']:.0f}% (GPU s / wall) | serial; no fsync, no rename |",
    ]
    for name, r, note in runs:
        util = f"{r['util']:.0f}% (nvidia-smi)" if r["util"] == r["util"] else "n/a"
        lines.append(
            f"| {name} | {fmt(r['wall'])} | {fmt(r['process_wall'])} | {len(paths) / r['wall']:.0f} | "
            f"{hours / r['wall']:.3f} | {fmt(r['decode'])} | {fmt(r['gpu'])} | {fmt(r['write'])} | "
            f"{fmt(r['startup'])} (stalled {fmt(r['stalled'])}) | {util} | {note}; "
            f"waited {fmt(r['wait'])} s for decode |"
        )
    lines.append("")
    for name, r, _ in runs:
        lines.append(
            f"Speed-up of {name} over the loop: {loop['wall'] / r['wall']:.2f}× by run time, "
            f"{loop['wall'] / r['process_wall']:.2f}× by process time (target ≥ 5×)."
        )
    lines.append(f"Max relative error nbxsig vs loop on 3 files: {err:.2e}.")
    report = "\n".join(lines) + "\n"
    print(report)
    for name, r, _ in runs:
        print(f"{name} log:\n{r['log']}\n")
    if args.markdown:
        Path(args.markdown).write_text(report, encoding="utf-8")
    return report


if __name__ == "__main__":
    main()
