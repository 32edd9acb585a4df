"""``nbxsig mel`` on a real GPU (``make gpu-test``): batched results equal per-file float64 oracles, and
files of any length share one compiled kernel (batch widths aligned to Triton's 16-divisibility).

Only the standard library writes the WAVs and torch computes the oracle: the GPU machine has neither
soundfile nor torchaudio for certain.
"""

from __future__ import annotations

import json
import wave
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from nbxsig.cli.main import main

import nbxsig.features as nf
from nbxsig.testing import assert_close

RATE = 16000


def _wavs(folder: Path, lengths: list[int], seed: int) -> list[Path]:
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, n in enumerate(lengths):
        pcm = np.clip(np.round(0.3 * rng.standard_normal(n) * 32767), -32768, 32767).astype("<i2")
        path = folder / f"f{i:02d}.wav"
        with wave.open(str(path), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(RATE)
            w.writeframes(pcm.tobytes())
        paths.append(path)
    return paths


def _oracle(path: Path) -> torch.Tensor:
    with wave.open(str(path), "rb") as w:
        x = np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float64) / 32768.0
    return nf.mel_spectrogram(
        torch.from_numpy(x)[None], sample_rate=RATE, n_fft=400, hop_length=160, n_mels=80, backend="torch"
    )


def _compiled_mel_kernels() -> int:
    """Compiled variants of the kernels the GPU's mel path runs: the four-step spectrogram and the
    mel projection (and the dense fused kernel, for paths that take it)."""
    from nbxsig.kernels import fourstep
    from nbxsig.kernels import mel as kmel

    total = 0
    for kernel in (fourstep._fourstep_kernel, kmel._project_kernel, kmel._mel_kernel):
        caches = getattr(kernel, "device_caches", None)
        if caches is None:
            pytest.skip("this Triton keeps no per-device kernel cache to count")
        total += sum(len(entry[0]) for entry in caches.values())
    return total


@pytest.mark.gpu
def test_gpu_mel_cli_equals_per_file_and_compiles_once(tmp_path: Path, cuda_device: torch.device) -> None:
    # fp32-grade dots (3xTF32) whatever an earlier test left set; restored below.
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        _run_and_check(tmp_path, cuda_device)
    finally:
        torch.set_float32_matmul_precision(precision)


def _run_and_check(tmp_path: Path, cuda_device: torch.device) -> None:
    runner = CliRunner()
    args = ["--device", str(cuda_device), "-j", "2", "--batch-size", "4", "-q"]
    # A first run compiles (and autotunes) the kernel for this process.
    first = _wavs(tmp_path / "a", [16000, 16160], seed=1)
    result = runner.invoke(main, ["mel", str(tmp_path / "a"), "-o", str(tmp_path / "oa"), *args])
    assert result.exit_code == 0, result.output
    compiled = _compiled_mel_kernels()
    assert compiled >= 2  # the spectrogram and the projection: this count sees the kernels that ran
    # Lengths whose raw widths, frame counts and strides differ in divisibility by 16.
    lengths = [8001, 8017, 12345, 16000, 16003, 24007, 31999, 40000, 401, 1601]
    paths = _wavs(tmp_path / "b", lengths, seed=2)
    result = runner.invoke(main, ["mel", str(tmp_path / "b"), "-o", str(tmp_path / "ob"), *args])
    assert result.exit_code == 0, result.output
    assert _compiled_mel_kernels() == compiled, "a batch shape compiled another kernel variant"
    for path in [*first, *paths]:
        out = tmp_path / ("oa" if path.parent.name == "a" else "ob") / path.with_suffix(".npy").name
        got = torch.from_numpy(np.load(out)).double()
        ref = _oracle(path)
        assert got.shape == ref.shape
        assert_close(got, ref, dtype="float32")


@pytest.mark.gpu
def test_gpu_vad_matches_cpu(tmp_path: Path, cuda_device: torch.device) -> None:
    rng = np.random.default_rng(4)
    pieces = [(0.7, 1e-3), (1.1, 0.2), (0.6, 1e-3), (0.4, 0.05), (0.5, 1e-3)]
    x = np.concatenate([amp * rng.standard_normal(int(sec * RATE)) for sec, amp in pieces])
    folder = tmp_path / "in"
    folder.mkdir()
    with wave.open(str(folder / "a.wav"), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(np.clip(np.round(x * 32767), -32768, 32767).astype("<i2").tobytes())
    runner = CliRunner()
    spans = {}
    for device in ("cpu", str(cuda_device)):
        out = tmp_path / f"{device.replace(':', '')}.json"
        result = runner.invoke(main, ["vad", str(folder / "a.wav"), "-o", str(out), "--device", device])
        assert result.exit_code == 0, result.output
        spans[device] = [(s["start"], s["end"]) for s in json.loads(out.read_text())["segments"]]
    assert len(spans["cpu"]) == 2
    np.testing.assert_allclose(spans[str(cuda_device)], spans["cpu"], atol=0.0101)  # within a hop
