"""samples/make_samples.py: deterministic output, the promised formats, the --check gate of `make demo`."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

# soundfile is not on the GPU machine's image; `make gpu-test` collects this module too (no gpu tests here).
sf = pytest.importorskip("soundfile")

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def _load_script():
    spec = importlib.util.spec_from_file_location("make_samples", SAMPLES / "make_samples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ms = _load_script()


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("samples")
    ms.generate(out)
    return out


def test_two_runs_are_byte_identical(generated: Path, tmp_path: Path) -> None:
    ms.generate(tmp_path)
    for name in ms.FILES:
        assert (generated / name).read_bytes() == (tmp_path / name).read_bytes(), name


def test_committed_files_match_a_fresh_generation(generated: Path) -> None:
    for name in ms.FILES:
        assert (SAMPLES / name).read_bytes() == (generated / name).read_bytes(), (
            f"samples/{name} is stale: run `python samples/make_samples.py` and commit"
        )


def test_check_passes_on_committed_files(capsys: pytest.CaptureFixture[str]) -> None:
    assert ms.main(["--check"]) == 0
    assert "byte-identical" in capsys.readouterr().out


def test_check_fails_and_names_the_file(
    generated: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ms.FILES:
        shutil.copy(generated / name, tmp_path / name)
    wav = tmp_path / "speech_16k.wav"
    data = bytearray(wav.read_bytes())
    data[1000] ^= 0x01  # one sample, one LSB
    wav.write_bytes(bytes(data))
    (tmp_path / "gray_256.png").unlink()
    assert ms.main(["--check", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "speech_16k.wav" in err and "1 samples differ, by up to 1 LSB" in err
    assert "gray_256.png: missing" in err
    assert "rgb_256.png" not in err


@pytest.mark.parametrize(
    ("name", "rate", "channels", "seconds"),
    [
        ("speech_16k.wav", 16_000, 1, 3.0),
        ("speech_24k.wav", 24_000, 1, 3.0),
        ("music_44k1_stereo.wav", 44_100, 2, 3.0),
    ],
)
def test_wav_format(generated: Path, name: str, rate: int, channels: int, seconds: float) -> None:
    info = sf.info(str(generated / name))
    assert (info.format, info.subtype) == ("WAV", "PCM_16")
    assert (info.samplerate, info.channels, info.frames) == (rate, channels, round(seconds * rate))
    data = (generated / name).read_bytes()
    assert len(data) == 44 + info.frames * channels * 2  # plain RIFF header, no extra chunks
    x, _ = sf.read(str(generated / name), always_2d=True)
    assert 0.85 < np.abs(x).max() < 0.9  # normalized, not clipped


@pytest.mark.parametrize("name", ["speech_16k.wav", "speech_24k.wav"])
def test_speech_is_voiced_at_a_speaking_pitch(generated: Path, name: str) -> None:
    x, rate = sf.read(str(generated / name))
    seg = x[int(1.1 * rate) : int(1.3 * rate)]  # inside the /o/ syllable
    seg = seg - seg.mean()
    ac = np.correlate(seg, seg, "full")[seg.size - 1 :]
    lo, hi = int(rate / 200), int(rate / 70)
    f0 = rate / (lo + int(np.argmax(ac[lo:hi])))
    assert 95 < f0 < 160, f0
    silence = x[int(0.0 * rate) : int(0.08 * rate)]
    assert np.sqrt(np.mean(silence**2)) < 0.02 * np.sqrt(np.mean(seg**2))


def test_music_channels_differ(generated: Path) -> None:
    x, _ = sf.read(str(generated / "music_44k1_stereo.wav"))
    corr = np.corrcoef(x.T)[0, 1]
    assert 0.2 < corr < 0.95, corr


def test_spectrogram_inverts_to_the_speech_excerpt(generated: Path) -> None:
    spec = np.load(generated / "spectrogram_nfft20_hop5.npy")
    params = json.loads((generated / "spectrogram_nfft20_hop5.json").read_text())
    n = params["source_num_samples"]
    assert spec.dtype == np.complex64
    assert spec.shape == (20 // 2 + 1, 1 + n // 5) == tuple(params["shape"])
    assert (params["n_fft"], params["hop_length"], params["sample_rate"]) == (20, 5, 24_000)
    audio, _rate = sf.read(str(generated / params["source"]))
    start = params["source_start_sample"]
    ref = audio[start : start + n]
    y = torch.istft(
        torch.from_numpy(spec).to(torch.complex128),
        n_fft=20,
        hop_length=5,
        window=torch.hann_window(20, dtype=torch.float64),
        center=True,
    ).numpy()
    assert y.shape == ref.shape
    # Within half a 16-bit step: quantizing the iSTFT gives back the WAV's samples exactly.
    np.testing.assert_array_equal(np.rint(y * 32768), np.rint(ref * 32768))
    assert np.abs(y - ref).max() < 2e-6


def _png_chunk_types(data: bytes) -> set[bytes]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    types, pos = set(), 8
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 4], "big")
        types.add(data[pos + 4 : pos + 8])
        pos += 12 + length
    return types


@pytest.mark.parametrize(("name", "mode"), [("gray_256.png", "L"), ("rgb_256.png", "RGB")])
def test_png_format(generated: Path, name: str, mode: str) -> None:
    with Image.open(generated / name) as im:
        assert (im.format, im.mode, im.size) == ("PNG", mode, (256, 256))
        px = np.asarray(im)
    assert _png_chunk_types((generated / name).read_bytes()) <= {b"IHDR", b"IDAT", b"IEND"}  # no metadata
    assert px.min() < 30 and px.max() > 225  # uses the range: dark and bright regions
    assert len(np.unique(px)) > 100  # gradients and textures, not flat fills


def test_samples_folder_within_budget() -> None:
    total = sum(p.stat().st_size for p in SAMPLES.iterdir() if p.is_file())
    assert total < 5 * 1024 * 1024, total


def test_check_and_espeak_are_exclusive() -> None:
    with pytest.raises(SystemExit) as exc:
        ms.main(["--check", "--espeak"])
    assert exc.value.code == 2


def test_espeak_without_the_program_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(ms.shutil, "which", lambda name: None)
    with pytest.raises(SystemExit, match="apt-get install espeak-ng"):
        ms.main(["--espeak", "--out", str(tmp_path)])
