"""Throughput of ``nbxsig mel`` over a folder of many files, against a plain per-file loop.

``python -m nbxsig.bench.cli_throughput [--files 2000] [--seconds 10] [--jobs 8 16] [--dir DIR]
[--markdown FILE]``

Generates ``--files`` mono 16 kHz PCM_16 WAV files of ``--seconds`` each (with the standard library,
once; a second run reuses them), then runs, each as a child process of this one (the same process
tree, each timed the same way: *process s* is the child's whole life, imports included; *run s* is the
child's own clock from its first file to its last output, imports excluded, device start-up included):

* **loop**: for each file, decode (soundfile, or nbxsig.io's standard-library WAV reader where
  soundfile is missing), move to the GPU, ``torchaudio.transforms.MelSpectrogram(16000, n_fft=400,
  hop_length=160, n_mels=80)``, copy back, ``np.save`` (no fsync, no rename). Its first pass over the
  files is *cold* (the CUDA context and cuFFT plans are made in it, as nbxsig's run makes its own);
  a second pass in the same process is *warm* (the loop's steady state);
* **nbxsig mel**: ``nbxsig mel DIR -o OUT --device cuda -j JOBS --batch-size B -v`` (decode in worker
  processes handing the samples over in shared memory, similar-length files batched on the GPU,
  atomic writes by the decode workers, the results handed over in shared memory too): on an empty
  Triton cache (*cold*, once), then on that cache for each ``--jobs``, and once with
  ``NBXSIG_FSYNC=0`` (the loop's durability). Its ``-v`` summary gives the decode (summed over
  workers) / device (main process, inside the batches) / write split: in the main process (writer
  threads, summed) and in the decode workers (summed), with the files the workers wrote.

**GPU busy** is given two ways: *events*: the summed intervals between CUDA events recorded around
each batch's device work (first copy in → last copy out; for the loop, around each file's) ÷ run s,
an upper bound on kernel time; and *nvidia-smi*: utilization.gpu sampled every 100 ms over the
child's life (the fraction of time a kernel ran), when nvidia-smi exists.

Reports files/s, audio-hours/s, the time split and GPU busy, checks that both produce the same
features (relative error on a few files), and prints a Markdown table (also written to
``--markdown``). The issue's target: nbxsig ≥ 5× the loop, GPU busy ≥ 50% of the wall time.

Not a ``Case`` suite (it times whole programs, not kernels), so ``nbxsig bench all`` does not run it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import wave
from pathlib import Path
from typing import Any

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
    """The plain loop a user would write; the decode / GPU / write split is measured with a
    synchronisation after each step, the GPU's busy time with CUDA events around its part."""
    import torch

    from nbxsig.batch import DeviceClock

    read, decoder = _decoder()
    start = time.perf_counter()
    mel = _baseline_mel(device)
    out.mkdir(parents=True, exist_ok=True)
    clock = DeviceClock()
    dec = gpu = wr = 0.0
    for i, p in enumerate(paths):
        t0 = time.perf_counter()
        x = read(p)
        t1 = time.perf_counter()
        with clock.measure(device):
            y = mel(torch.from_numpy(x).to(device)).cpu().numpy()  # .cpu() synchronises
        t2 = time.perf_counter()
        np.save(out / f"{i:05d}.npy", y)
        t3 = time.perf_counter()
        dec, gpu, wr = dec + t1 - t0, gpu + t2 - t1, wr + t3 - t2
    wall = time.perf_counter() - start
    return {"wall": wall, "decode": dec, "gpu": gpu, "write": wr, "busy": clock.seconds, "decoder": decoder}


def loop_child(folder: Path, out: Path, device: str) -> None:
    """The loop as its own process: a cold pass (CUDA context, cuFFT plans inside), then a warm one;
    one JSON line on stdout."""
    t0 = time.perf_counter()
    import torch

    with contextlib.suppress(ImportError):
        import torchaudio  # noqa: F401 - its import time belongs to the loop's process

    imports = time.perf_counter() - t0
    paths = sorted(folder.rglob("*.wav"))
    cold = run_loop(paths, out, torch.device(device))
    warm = run_loop(paths, out.with_name(out.name + "-warm"), torch.device(device))
    print(json.dumps({"imports": imports, "cold": cold, "warm": warm}))


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


def _child(
    cmd: list[str], *, device: str, env: dict[str, str] | None = None
) -> tuple[str, str, float, float]:
    """Run ``cmd``; returns stdout, stderr, its wall time and the mean nvidia-smi utilisation."""
    index = int(device.partition(":")[2] or 0)
    sampler = _GpuSampler(index) if device.startswith("cuda") else None
    start = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    wall = time.perf_counter() - start
    util = sampler.stop() if sampler is not None else None
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stderr}")
    return res.stdout, res.stderr, wall, util if util is not None else float("nan")


def run_loop_process(folder: Path, out: Path, *, device: str) -> dict[str, Any]:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "nbxsig.bench.cli_throughput", "--loop-child", str(folder), str(out)]
    stdout, _, wall, util = _child([*cmd, "--device", device], device=device)
    stats = json.loads(stdout.strip().splitlines()[-1])
    stats["process_wall"], stats["util"] = wall, util
    return stats


def run_cli(
    folder: Path, out: Path, *, jobs: int, batch_size: int, device: str, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """``nbxsig mel`` as a user runs it; times from its -v summary plus the process's wall time."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "nbxsig.cli.main", "mel", str(folder), "-o", str(out), "--device", device]
    cmd += ["-j", str(jobs), "--batch-size", str(batch_size), "-v"]
    _, text, wall, util = _child(cmd, device=device, env=env)
    num = r"([0-9.]+)"
    found = {
        "wall": re.search(rf"skipped in {num} s", text),
        "decode": re.search(rf"decode {num} s", text),
        "gpu": re.search(rf"device {num} s", text),
        "write": re.search(rf"write {num} s", text),
        "wait": re.search(rf"waiting for decode {num} s", text),
        "busy": re.search(rf"device busy {num} s", text),
        "startup": re.search(rf"start-up {num} s", text),
        "stalled": re.search(rf"stalled {num} s", text),
        # The write split: main process (writer threads) vs decode workers.
        "write_main": re.search(rf"write {num} s \({num} s threads", text),
        "write_workers": re.search(rf"s threads, {num} s workers", text),
        "worker_files": re.search(r"s workers: ([0-9]+) files", text),
    }
    stats: dict[str, Any] = {k: float(m.group(1)) if m else float("nan") for k, m in found.items()}
    if found["write_main"]:
        stats["write_main"] = float(found["write_main"].group(2))
    stats["process_wall"], stats["util"], stats["log"] = wall, util, text.strip()
    return stats


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
    parser.add_argument("--jobs", type=int, nargs="+", default=[8, 16], help="nbxsig mel -j (each timed)")
    parser.add_argument("--batch-size", type=int, default=64, help="nbxsig mel --batch-size")
    parser.add_argument("--device", default="cuda")
    parser.add_argument(
        "--no-cold",
        action="store_true",
        help="skip the run on an empty Triton cache (kernel compilation and autotuning included)",
    )
    parser.add_argument("--markdown", help="also write the table to this file")
    parser.add_argument("--loop-child", nargs=2, metavar=("FOLDER", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.loop_child:
        loop_child(Path(args.loop_child[0]), Path(args.loop_child[1]), args.device)
        return ""

    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(
            "cli_throughput needs a CUDA device (or --device cpu for a dry run): torch sees none"
        )
    root = Path(args.dir)
    folder = root / "wav"
    t0 = time.perf_counter()
    generate(folder, files=args.files, seconds=args.seconds)
    print(f"{args.files} × {args.seconds:g} s WAVs ready in {time.perf_counter() - t0:.1f} s", flush=True)
    paths = sorted(folder.rglob("*.wav"))
    n, hours = len(paths), len(paths) * args.seconds / 3600

    loop_stats = run_loop_process(folder, root / "loop", device=args.device)
    loop, warm_loop = loop_stats["cold"], loop_stats["warm"]
    # The loop's process for one pass, as a user runs it: its whole life less the warm pass.
    loop_process = loop_stats["process_wall"] - warm_loop["wall"]
    # The Triton cache of these runs only: "cold" starts from nothing, as on a fresh machine.
    cache = root / "triton-cache"
    env = {"TRITON_CACHE_DIR": str(cache)}
    common = dict(batch_size=args.batch_size, device=args.device)
    top = max(args.jobs)
    runs: list[tuple[str, dict, str]] = []
    if not args.no_cold:
        shutil.rmtree(cache, ignore_errors=True)
        cold = run_cli(folder, root / "cli-cold", jobs=top, env=env, **common)
        runs.append((f"nbxsig mel -j {top}, cold (empty Triton cache)", cold, "compiles + autotunes"))
    elif not cache.exists():
        run_cli(folder, root / "cli-prime", jobs=top, env=env, **common)  # fills the cache; not reported
    for jobs in args.jobs:
        r = run_cli(folder, root / f"cli-j{jobs}", jobs=jobs, env=env, **common)
        runs.append((f"nbxsig mel -j {jobs}", r, "atomic writes + fsync (default)"))
    nofsync = run_cli(folder, root / "cli-nofsync", jobs=top, env={**env, "NBXSIG_FSYNC": "0"}, **common)
    runs.append((f"nbxsig mel -j {top}, NBXSIG_FSYNC=0", nofsync, "atomic writes, no fsync (as the loop)"))
    err = max(check(paths, folder, root / "loop", root / f"cli-j{jobs}") for jobs in args.jobs)

    def fmt(x: float) -> str:
        return "n/a" if x != x else (f"{x:.2f}" if x < 10 else f"{x:.1f}")

    def busy(seconds: float, wall: float, util: float) -> str:
        smi = f", {util:.0f}% smi" if util == util else ""
        return f"{100 * seconds / wall:.1f}% events{smi}"

    shm = os.statvfs("/dev/shm") if os.path.isdir("/dev/shm") else None
    shm_text = f"{shm.f_bavail * shm.f_frsize / 2**30:.0f} GiB free in /dev/shm" if shm else "no /dev/shm"
    gpu_name = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "CPU (dry run)"
    lines = [
        f"`nbxsig mel` vs a per-file loop: {n} × {args.seconds:g} s mono 16 kHz PCM_16 WAV "
        f"({hours:.2f} audio-hours), 80 mels, n_fft 400, hop 160, on {gpu_name}; "
        f"nbxsig --batch-size {args.batch_size}; {os.cpu_count()} CPUs; {shm_text}; loop decoder: "
        f"{loop['decoder']}. *run s*: the process's own clock, first file → last output (device start-up "
        "inside, imports outside); *process s*: the whole child process (the loop's less its warm pass). "
        "decode and write s of nbxsig are summed over its workers and writer threads (write: main "
        "process's threads + decode workers, and the files the workers wrote); the loop's columns are "
        "serial.",
        "",
        "| method | run s | process s | files/s (run) | audio-h/s (run) | decode s | device s | write s "
        "| start-up s | GPU busy | notes |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r, note in (
        ("loop, cold (first pass)", loop, f"imports {fmt(loop_stats['imports'])} s"),
        ("loop, warm (second pass)", warm_loop, "steady state"),
    ):
        util = loop_stats["util"] if r is loop else float("nan")
        lines.append(
            f"| {name}: soundfile + torchaudio + np.save | {fmt(r['wall'])} | "
            f"{fmt(loop_process) if r is loop else '–'} | {n / r['wall']:.0f} | "
            f"{hours / r['wall']:.3f} | {fmt(r['decode'])} | {fmt(r['gpu'])} | {fmt(r['write'])} | "
            f"(in run s) | {busy(r['busy'], r['wall'], util)} | serial; no fsync, no rename; {note} |"
        )
    for name, r, note in runs:
        split = (
            f" ({fmt(r['write_main'])} main + {fmt(r['write_workers'])} workers: "
            f"{r['worker_files']:.0f} files)"
            if r["worker_files"] == r["worker_files"]
            else ""
        )
        lines.append(
            f"| {name} | {fmt(r['wall'])} | {fmt(r['process_wall'])} | {n / r['wall']:.0f} | "
            f"{hours / r['wall']:.3f} | {fmt(r['decode'])} | {fmt(r['gpu'])} | {fmt(r['write'])}{split} | "
            f"{fmt(r['startup'])} (stalled {fmt(r['stalled'])}) | {busy(r['busy'], r['wall'], r['util'])} | "
            f"{note}; waited {fmt(r['wait'])} s for decode |"
        )
    lines.append("")
    for name, r, _ in runs:
        lines.append(
            f"Speed-up of {name} over the loop: {loop['wall'] / r['wall']:.2f}× by run time (both cold), "
            f"{loop_process / r['process_wall']:.2f}× by process time, "
            f"{warm_loop['wall'] / r['wall']:.2f}× against the warm loop (target ≥ 5×)."
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
