"""``nbxsig vad``: energy + spectral-flux voice activity on batched mel spectrograms."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _marks import suite_dependency
from click.testing import CliRunner
from nbxsig.cli.main import main
from nbxsig.cli.plot import read_segments
from nbxsig.cli.vad import VadParams, VadResult, segments_from_mask, vad_save

from nbxsig import io as nio

# soundfile is not on the GPU machine's image; `make gpu-test` collects this module too (no gpu tests here).
sf = suite_dependency("soundfile")

RATE = 16000


def invoke(*args: str | Path):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def bursts(rng: np.random.Generator, plan: list[tuple[float, float]], rate: int = RATE) -> np.ndarray:
    """Concatenated (seconds, amplitude) pieces of white noise: amplitude 1e-3 is the background."""
    return np.concatenate([amp * rng.standard_normal(int(sec * rate)) for sec, amp in plan]).astype(
        np.float32
    )


def segments(path: Path) -> list[tuple[float, float]]:
    return [(s["start"], s["end"]) for s in json.loads(path.read_text())["segments"]]


def test_bursts_are_found_where_they_are(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    x = bursts(rng, [(0.6, 1e-3), (0.8, 0.2), (0.5, 1e-3), (0.3, 0.05), (0.4, 1e-3)])
    sf.write(tmp_path / "a.wav", x, RATE, subtype="PCM_16")
    result = invoke("vad", tmp_path / "a.wav", "-o", tmp_path / "a.json", "--pad-ms", "0", "--device", "cpu")
    assert result.exit_code == 0, result.output
    got = segments(tmp_path / "a.json")
    truth = [(0.6, 1.4), (1.9, 2.2)]
    assert len(got) == len(truth), got
    for (s, e), (ts, te) in zip(got, truth, strict=True):
        # Frames are 25 ms long, centred every 10 ms: an edge is found within about a frame.
        assert abs(s - ts) <= 0.03 and abs(e - te) <= 0.03, (got, truth)
    record = json.loads((tmp_path / "a.json").read_text())
    assert record["sample_rate"] == RATE and record["duration"] == pytest.approx(len(x) / RATE)
    assert record["speech_seconds"] == pytest.approx(sum(e - s for s, e in got), abs=2e-3)
    assert read_segments(str(tmp_path / "a.json")) == got  # `nbxsig plot --segments` reads it


def test_silence_and_steady_noise_have_no_segments(tmp_path: Path) -> None:
    rng = np.random.default_rng(12)
    sf.write(tmp_path / "zeros.wav", np.zeros(RATE, np.float32), RATE, subtype="PCM_16")
    sf.write(tmp_path / "noise.wav", bursts(rng, [(1.5, 0.05)]), RATE, subtype="PCM_16")
    result = invoke("vad", tmp_path, "-o", tmp_path / "out", "--device", "cpu", "-j", "0")
    assert result.exit_code == 0, result.output
    assert segments(tmp_path / "out/zeros.json") == []
    assert segments(tmp_path / "out/noise.json") == []


def test_batched_equals_one_file_at_a_time(tmp_path: Path) -> None:
    rng = np.random.default_rng(13)
    src = tmp_path / "in"
    src.mkdir()
    for i, extra in enumerate([0.0, 0.013, 0.21, 0.5]):
        plan = [(0.3 + extra, 1e-3), (0.4, 0.1 * (i + 1)), (0.5, 1e-3), (0.25, 0.3), (0.3, 1e-3)]
        sf.write(src / f"f{i}.wav", bursts(rng, plan), RATE, subtype="PCM_16")
    np.save(src / "g.npy", bursts(rng, [(0.4, 1e-3), (0.5, 0.2), (0.4, 1e-3)])[None])
    result = invoke("vad", src, "-o", tmp_path / "batched", "--batch-size", "8", "-j", "2", "--device", "cpu")
    assert result.exit_code == 0, result.output
    for path in sorted(src.iterdir()):
        single = tmp_path / "single" / path.with_suffix(".json").name
        result = invoke("vad", path, "-o", single, "--device", "cpu")
        assert result.exit_code == 0, result.output
        got = segments(tmp_path / "batched" / single.name)
        assert got == segments(single) and len(got) >= 1, path.name


def test_segments_from_mask_bridges_drops_pads_and_merges() -> None:
    mask = np.zeros(100, bool)
    mask[10:30] = True  # 0.10-0.30 s
    mask[33:50] = True  # a 30 ms gap: bridged
    mask[70:72] = True  # a 20 ms blip: dropped
    mask[90:100] = True  # runs to the end: padding clipped at the duration
    spans = segments_from_mask(
        mask, hop_s=0.01, duration=1.0, min_speech_s=0.05, min_silence_s=0.05, pad_s=0.02
    )
    np.testing.assert_allclose(spans, [(0.08, 0.52), (0.88, 1.0)], atol=1e-12)
    # Padding that makes two segments overlap merges them.
    spans = segments_from_mask(mask, hop_s=0.01, duration=1.0, min_speech_s=0.0, min_silence_s=0.0, pad_s=0.1)
    np.testing.assert_allclose(spans, [(0.0, 1.0)], atol=1e-12)
    assert (
        segments_from_mask(
            np.zeros(5, bool), hop_s=0.01, duration=0.05, min_speech_s=0, min_silence_s=0, pad_s=0
        )
        == []
    )


def test_bad_options_and_files(tmp_path: Path) -> None:
    rng = np.random.default_rng(14)
    sf.write(tmp_path / "a.wav", bursts(rng, [(0.5, 0.1)]), RATE, subtype="PCM_16")
    result = CliRunner().invoke(main, ["vad", str(tmp_path / "a.wav"), "--hop-ms", "0"])
    assert result.exit_code == 2 and "--hop-ms" in result.output
    (tmp_path / "broken.wav").write_bytes(b"RIFF....WAVE")
    result = invoke("vad", tmp_path, "-o", tmp_path / "out", "--device", "cpu", "-j", "0")
    assert result.exit_code == 1
    assert (tmp_path / "out/a.json").exists() and not (tmp_path / "out/broken.json").exists()
    # 1 Hz audio holds no band at all: "no speech" from NaN features, then; now the file fails, in words
    # that name no --f-min (vad has none).
    sf.write(tmp_path / "one_hz.wav", bursts(rng, [(0.5, 0.1)])[:400], 1, subtype="PCM_16")
    result = invoke("vad", tmp_path / "one_hz.wav", "-o", tmp_path / "h.json", "--device", "cpu")
    assert result.exit_code == 1 and "no band lies below the Nyquist frequency of 1 Hz audio" in result.stderr
    assert not (tmp_path / "h.json").exists()


def test_the_json_is_never_written_with_nan(tmp_path: Path) -> None:
    params = VadParams(25.0, 10.0, 40, float("nan"), 10.0, 3.0, -60.0, 100.0, 200.0, 50.0)
    item = nio.Audio(np.zeros((1, 10), np.float32), RATE)
    with pytest.raises(ValueError, match="JSON compliant"):
        vad_save(item, VadResult(RATE, 1.0, []), tmp_path / "v.json", p=params)
    assert list(tmp_path.iterdir()) == []
