"""nbxsig.io: decoding, refusals of bad files, atomic writers."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from _marks import suite_dependency

from nbxsig import io as nio
from nbxsig.errors import ParameterTypeError, ParameterValueError

# soundfile is not on the GPU machine's image; `make gpu-test` collects this module too (no gpu tests here).
sf = suite_dependency("soundfile")


def _noise(generator_seed: int, shape: tuple[int, ...]) -> np.ndarray:
    return (np.random.default_rng(generator_seed).standard_normal(shape) * 0.2).astype(np.float32)


@pytest.mark.parametrize(
    ("name", "subtype", "atol"),
    [
        ("a.wav", "PCM_16", 1 / 32768),
        ("a.wav", "FLOAT", 0.0),
        ("a.flac", "PCM_24", 1 / 2**23),
        ("a.wav", None, 1e-4),
    ],
    ids=["wav-pcm16", "wav-float", "flac-pcm24", "wav-default"],
)
def test_audio_round_trip(tmp_path: Path, name: str, subtype: str | None, atol: float) -> None:
    data = _noise(1, (2, 1001))
    path = tmp_path / name
    nio.write_audio(path, data, 22050, subtype=subtype)
    audio = nio.read_audio(path)
    assert audio.sample_rate == 22050
    assert audio.data.shape == (2, 1001) and audio.data.dtype == np.float32
    assert audio.samples == 1001
    assert audio.subtype == (subtype or "PCM_16")
    np.testing.assert_allclose(audio.data, data, atol=atol, rtol=0)


def test_pcm_writes_clip_instead_of_wrapping(tmp_path: Path) -> None:
    path = tmp_path / "loud.wav"
    nio.write_audio(path, np.array([[1.7, -3.0, 0.5]], dtype=np.float32), 8000, subtype="PCM_16")
    got = nio.read_audio(path).data[0]
    assert got[0] > 0.99 and got[1] <= -0.99 and abs(got[2] - 0.5) < 1e-4


def test_write_audio_keeps_integer_data_and_refuses_what_it_cannot_write(tmp_path: Path) -> None:
    # int16 data is full scale at 32768, as soundfile writes it (clipping it to ±1 made a square wave).
    x = (np.sin(np.arange(800) / 10) * 10000).astype(np.int16)
    nio.write_audio(tmp_path / "int.wav", x, 8000)
    assert np.array_equal(np.round(nio.read_audio(tmp_path / "int.wav").data[0] * 32768), x)
    # A compressed integer codec clips too (it wrapped a 1.5 around to -0.5); lower-case subtypes alike.
    nio.write_audio(tmp_path / "adpcm.wav", np.full(2000, 1.5), 8000, subtype="ima_adpcm")
    assert nio.read_audio(tmp_path / "adpcm.wav").data.min() > -0.25
    for data, rate, message in [
        (np.array([np.nan, 0.1]), 8000, "data must be finite samples"),
        (np.full(4, 0.1), 0, "sample_rate must be a positive integer"),
        (np.full(4, 0.1), 8000.5, "sample_rate must be a positive integer"),
        (np.full((2, 2, 2), 0.1), 8000, "data must be real samples"),
        (np.full(3, 0.1 + 0.1j), 8000, "data must be real samples"),
    ]:
        with pytest.raises((ValueError, TypeError), match=message):
            nio.write_audio(tmp_path / "bad.wav", data, rate)
    assert not (tmp_path / "bad.wav").exists()


def test_can_write_audio() -> None:
    assert nio.can_write_audio(".WAV", "FLOAT") and nio.can_write_audio(".flac")
    assert not nio.can_write_audio(".flac", "FLOAT") and not nio.can_write_audio(".mp3")


def test_bad_subtype_for_format_is_refused(tmp_path: Path) -> None:
    with pytest.raises(nio.InputFileError, match=r"FLOAT.*FLAC"):
        nio.write_audio(tmp_path / "x.flac", np.zeros((1, 10)), 8000, subtype="FLOAT")
    assert list(tmp_path.iterdir()) == []


def test_bad_audio_files_are_refused(tmp_path: Path) -> None:
    (tmp_path / "corrupt.wav").write_bytes(b"RIFF\x00\x00\x00\x00WAVEnot really a wav file")
    (tmp_path / "empty.flac").write_bytes(b"")
    sf.write(tmp_path / "zero.wav", np.zeros((0, 1), np.float32), 16000)
    sf.write(tmp_path / "nan.wav", np.full((10, 1), np.nan, np.float32), 16000, subtype="FLOAT")
    cases = {
        "corrupt.wav": "cannot decode as audio",
        "empty.flac": "empty",
        "zero.wav": "zero frames",
        "nan.wav": "not finite",
        "missing.wav": "no such file",
    }
    for name, message in cases.items():
        with pytest.raises(nio.InputFileError, match=message) as info:
            nio.read_audio(tmp_path / name)
        assert name in str(info.value)
    assert nio.read_audio(tmp_path / "zero.wav", allow_empty=True).data.shape == (1, 0)


def test_a_decode_error_gives_libsndfile_s_reason_not_the_name_as_bytes(tmp_path: Path) -> None:
    # The file is opened by its name as bytes (see read_audio); soundfile's message repeated that name
    # as a Python bytes literal: "x.wav: cannot decode as audio (Error opening b'.../x.wav': ...)".
    path = tmp_path / "fake.wav"
    path.write_bytes(b"this is not audio, whatever its name says " * 8)
    for read in (nio.read_audio, nio.audio_info):
        with pytest.raises(nio.InputFileError) as info:
            read(path)
        assert str(info.value) == f"{path}: cannot decode as audio (Format not recognised.)"


@pytest.mark.parametrize(
    ("name", "data_bytes", "soundfile_present"),
    [
        ("cut.wav", 4000, True),
        ("cut.aiff", 4008, True),
        ("cut.au", 4000, True),
        ("cut.w64", 4000, True),
        ("cut.wav", 4000, False),
    ],
    ids=["wav", "aiff", "au", "w64", "wav-stdlib"],
)
def test_truncated_audio_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, data_bytes: int, soundfile_present: bool
) -> None:
    # A copy cut short: libsndfile (and the stdlib wave reader) would read the first half as if it
    # were the whole file. data_bytes: 2000 PCM_16 frames, plus the SSND chunk's 8-byte offset/block.
    path = tmp_path / name
    nio.write_audio(path, _noise(3, (1, 2000)), 16000, subtype="PCM_16")
    whole = path.read_bytes()
    cut = len(whole) - 1000
    path.write_bytes(whole[:cut])
    if not soundfile_present:  # the GPU machine's reader (stdlib wave) would read the half too
        monkeypatch.setattr(nio, "_soundfile", lambda: None)
    held = data_bytes - 1000
    pattern = f"{name}: truncated: the header declares {data_bytes} bytes of audio, the file holds {held}"
    with pytest.raises(nio.InputFileError, match=pattern):
        nio.read_audio(path)
    with pytest.raises(nio.InputFileError, match="truncated"):
        nio.audio_info(path)


@pytest.mark.parametrize("length", [0xFFFFFFFF, 0x7FFFF000], ids=["ffffffff", "sox-unspecified"])
def test_streamed_wav_without_a_length_is_read_whole(tmp_path: Path, length: int) -> None:
    # Writers to a pipe cannot go back to fill in the data length; they leave a placeholder, and the
    # data runs to the end of the file. That is not a truncation.
    path = tmp_path / "streamed.wav"
    data = _noise(4, (1, 500))
    nio.write_audio(path, data, 8000, subtype="FLOAT")
    raw = bytearray(path.read_bytes())
    at = raw.index(b"data") + 4
    raw[at : at + 4] = length.to_bytes(4, "little")
    path.write_bytes(bytes(raw))
    np.testing.assert_array_equal(nio.read_audio(path).data, data)


@pytest.mark.parametrize(
    ("shape", "channels"), [((50,), 1), ((3, 50), 3), ((2, 3, 50), 6)], ids=["L", "C-L", "B-C-L"]
)
def test_read_signal_from_npy(tmp_path: Path, shape: tuple[int, ...], channels: int) -> None:
    data = _noise(2, shape).astype(np.float64)
    np.save(tmp_path / "w.npy", data)
    audio = nio.read_signal(tmp_path / "w.npy", default_rate=12345)
    assert audio.sample_rate == 12345 and audio.rate_assumed
    assert audio.data.shape == (channels, 50) and audio.data.dtype == np.float32
    np.testing.assert_allclose(audio.data.reshape(shape), data, rtol=1e-6)


def test_read_signal_refusals(tmp_path: Path) -> None:
    np.save(tmp_path / "complex.npy", np.ones(4, np.complex64))
    np.save(tmp_path / "empty.npy", np.zeros((2, 0), np.float32))
    np.save(tmp_path / "scalar.npy", np.float32(0.5))
    np.save(tmp_path / "inf.npy", np.array([1.0, np.inf], np.float32))
    np.savez(tmp_path / "z.npz", a=np.ones(3))
    (tmp_path / "bad.npy").write_bytes(b"\x93NUMPY garbage")
    (tmp_path / "x.txt").write_text("hello")
    np.save(tmp_path / "huge.npy", np.array([0.5, -1e300]))
    cases = {
        "complex.npy": "real array",
        "empty.npy": "empty",
        "scalar.npy": r"an array of samples, got a single value \(shape \(\)\)",  # (not "empty")
        "inf.npy": "not finite",
        "z.npz": "unsupported",
        "bad.npy": "cannot load",
        "x.txt": "unsupported",
        "nope/": "no such file",  # missing, before its (lack of an) extension is judged
        "huge.npy": r"exceed the float32 range \(peak magnitude 1e\+300\)",
    }
    for name, message in cases.items():
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no numpy overflow warning on the way
            with pytest.raises(nio.InputFileError, match=message):
                nio.read_signal(tmp_path / name, default_rate=16000)


def test_a_symbolic_link_loop_is_named_as_one(tmp_path: Path) -> None:
    # Path.exists() is False for a loop as for a dangling link: it was called "a broken symbolic link".
    (tmp_path / "a.wav").symlink_to(tmp_path / "b.wav")
    (tmp_path / "b.wav").symlink_to(tmp_path / "a.wav")
    for read in (nio.read_audio, lambda p: nio.read_signal(p, default_rate=8000)):
        with pytest.raises(
            nio.InputFileError, match=r"a\.wav: a symbolic link loop \(it never reaches a file\)"
        ):
            read(tmp_path / "a.wav")


def test_read_signal_refuses_an_npz_archive_named_npy(tmp_path: Path) -> None:
    np.savez(tmp_path / "x.npz", a=np.ones(100, np.float32))
    (tmp_path / "x.npy").write_bytes((tmp_path / "x.npz").read_bytes())
    with pytest.raises(nio.InputFileError, match=r"x\.npy: an \.npz archive of 1 array\(s\), not a \.npy"):
        nio.read_signal(tmp_path / "x.npy", default_rate=16000)


def test_audio_with_a_name_that_is_not_utf8(tmp_path: Path) -> None:
    path = Path(os.fsdecode(bytes(tmp_path) + b"/g\xff.wav"))  # held by Python as a surrogate
    nio.write_audio(path, _noise(3, (1, 100)), 8000)
    try:
        frames = nio.read_audio(path).samples, nio.audio_info(path)["frames"]
    except nio.InputFileError as exc:  # as ASCII: pytest-xdist cannot carry the name in a report
        frames = ascii(str(exc))
    assert frames == (100, 100)


def test_object_arrays_are_not_unpickled(tmp_path: Path) -> None:
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(nio.InputFileError, match="cannot load"):
        nio.read_array(tmp_path / "obj.npy")


def test_npz_round_trip(tmp_path: Path) -> None:
    spec = (_noise(3, (2, 5, 7)) + 1j * _noise(4, (2, 5, 7))).astype(np.complex64)
    nio.write_npz(tmp_path / "s.npz", {"spec": spec, "n_fft": 8, "window": "hann"})
    loaded = nio.read_array(tmp_path / "s.npz")
    assert isinstance(loaded, dict)
    np.testing.assert_array_equal(loaded["spec"], spec)
    assert loaded["n_fft"].item() == 8 and loaded["window"].item() == "hann"


@pytest.mark.parametrize("channels", [1, 3, 4], ids=["gray", "rgb", "rgba"])
def test_image_round_trip(tmp_path: Path, channels: int) -> None:
    data = np.random.default_rng(5).random((channels, 9, 13)).astype(np.float32)
    nio.write_image(tmp_path / "i.png", data)
    back = nio.read_image(tmp_path / "i.png")
    assert back.shape == (channels, 9, 13)
    np.testing.assert_allclose(back, data, atol=0.5 / 255 + 1e-6)


def test_corrupt_image_is_refused(tmp_path: Path) -> None:
    (tmp_path / "x.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 20)
    with pytest.raises(nio.InputFileError, match="cannot decode as an image"):
        nio.read_image(tmp_path / "x.png")


def test_atomic_open_leaves_nothing_on_error(tmp_path: Path) -> None:
    dest = tmp_path / "out.npy"
    dest.write_bytes(b"old")
    with pytest.raises(RuntimeError), nio.atomic_open(dest) as f:
        f.write(b"partial")
        raise RuntimeError("boom")
    assert dest.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.npy"]


def test_atomic_open_replaces_on_success(tmp_path: Path) -> None:
    dest = tmp_path / "sub" / "out.bin"
    with nio.atomic_open(dest) as f:
        f.write(b"new")
    assert dest.read_bytes() == b"new"
    assert [p.name for p in dest.parent.iterdir()] == ["out.bin"]


def test_atomic_open_under_a_regular_file_fails_cleanly(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(OSError):
        nio.write_npy(tmp_path / "file" / "out.npy", np.zeros(3))


def test_remove_stale_temps(tmp_path: Path) -> None:
    dest = tmp_path / "a[1].wav"
    stale = nio.temp_sibling(dest)
    stale.write_bytes(b"partial")
    other = nio.temp_sibling(tmp_path / "b.wav")
    other.write_bytes(b"partial")
    assert nio.is_temp_name(stale.name) and not nio.is_temp_name(dest.name)
    assert nio.remove_stale_temps(dest) == 1
    assert not stale.exists() and other.exists()


def test_kind_of() -> None:
    assert [nio.kind_of(p) for p in ("a.WAV", "b.flac", "c.npz", "d.JPG", "e.txt")] == [
        "audio",
        "audio",
        "array",
        "image",
        "unknown",
    ]


def test_import_without_soundfile() -> None:
    """The GPU machine has no soundfile: importing nbxsig.io and writing arrays must still work."""
    code = (
        "import sys; sys.modules['soundfile'] = None\n"
        "import numpy as np, tempfile, os\n"
        "import nbxsig.io as nio\n"
        "d = tempfile.mkdtemp(); nio.write_npy(os.path.join(d, 'x.npy'), np.ones(3))\n"
        "print(nio.read_array(os.path.join(d, 'x.npy')).sum())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ.copy())
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "3.0"


def test_wav_without_soundfile_matches_soundfile(tmp_path: Path) -> None:
    """The GPU machine's fallback decoder (stdlib wave) gives soundfile's samples for PCM WAV."""
    data = _noise(9, (2, 301))
    for subtype in ("PCM_16", "PCM_24", "PCM_32", "PCM_U8"):
        nio.write_audio(tmp_path / f"{subtype}.wav", data, 8000, subtype=subtype)
    code = (
        "import sys, json; sys.modules['soundfile'] = None\n"
        "import numpy as np, nbxsig.io as nio\n"
        f"d = {str(tmp_path)!r}\n"
        "out = {}\n"
        "for s in ('PCM_16', 'PCM_24', 'PCM_32', 'PCM_U8'):\n"
        "    a = nio.read_audio(f'{d}/{s}.wav'); np.save(f'{d}/{s}.npy', a.data)\n"
        "    out[s] = [a.sample_rate, a.subtype, nio.audio_info(f'{d}/{s}.wav')['frames']]\n"
        "try:\n"
        "    nio.read_audio(f'{d}/PCM_16.npy')\n"
        "except nio.InputFileError as e:\n"
        "    out['error'] = str(e)\n"
        "print(json.dumps(out))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ.copy())
    assert res.returncode == 0, res.stderr
    import json

    facts = json.loads(res.stdout)
    for subtype in ("PCM_16", "PCM_24", "PCM_32", "PCM_U8"):
        assert facts[subtype] == [8000, subtype, 301]
        np.testing.assert_array_equal(
            np.load(tmp_path / f"{subtype}.npy"), nio.read_audio(tmp_path / f"{subtype}.wav").data
        )
    assert "cannot decode as audio" in facts["error"]


@pytest.mark.parametrize(("setting", "syncs"), [(None, 1), ("1", 1), ("0", 0), ("off", 0)])
def test_fsync_can_be_turned_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setting: str | None, syncs: int
) -> None:
    import os

    calls = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(fd) or real(fd))
    if setting is None:
        monkeypatch.delenv("NBXSIG_FSYNC", raising=False)
    else:
        monkeypatch.setenv("NBXSIG_FSYNC", setting)
    nio.write_npy(tmp_path / "a.npy", np.arange(3.0))
    assert len(calls) == syncs
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), np.arange(3.0))
    assert [p.name for p in tmp_path.iterdir()] == ["a.npy"]  # still renamed into place


def test_npz_writes_any_key_and_refuses_what_cannot_be_read_back(tmp_path: Path) -> None:
    # "file" once collided with np.savez's own parameter (a raw TypeError).
    nio.write_npz(tmp_path / "k.npz", {"file": np.arange(3), "a/b": 1.5})
    loaded = nio.read_array(tmp_path / "k.npz")
    assert isinstance(loaded, dict) and sorted(loaded) == ["a/b", "file"]
    np.testing.assert_array_equal(loaded["file"], np.arange(3))
    # Object arrays were pickled on write, then refused by read_array.
    with pytest.raises(ParameterTypeError, match=r"arrays\['o'\] must be numbers, bools or strings"):
        nio.write_npz(tmp_path / "o.npz", {"o": np.array([None, 1], dtype=object)})
    with pytest.raises(ParameterTypeError, match="data must be numbers, bools or strings"):
        nio.write_npy(tmp_path / "o.npy", np.array([{"a": 1}], dtype=object))
    with pytest.raises(ParameterTypeError, match=r"arrays must be a mapping of names to arrays, got \[1\]"):
        nio.write_npz(tmp_path / "l.npz", [1])
    with pytest.raises(ParameterTypeError, match="arrays' keys must be str, got 1"):
        nio.write_npz(tmp_path / "i.npz", {1: np.ones(2)})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.npz"]


def test_atomic_open_keeps_the_mode_of_the_file_it_replaces(tmp_path: Path) -> None:
    dest = tmp_path / "secret.npy"
    dest.write_bytes(b"old")
    dest.chmod(0o600)
    nio.write_npy(dest, np.ones(2))
    assert dest.stat().st_mode & 0o777 == 0o600
    np.testing.assert_array_equal(np.load(dest), np.ones(2))


def test_atomic_open_writes_through_a_symbolic_link(tmp_path: Path) -> None:
    # Renaming over the link replaced the link with a file and left its target unwritten.
    (tmp_path / "data").mkdir()
    target = tmp_path / "data" / "t.npy"
    target.write_bytes(b"old")
    link = tmp_path / "link.npy"
    link.symlink_to(target)
    nio.write_npy(link, np.arange(4))
    assert link.is_symlink() and link.resolve() == target.resolve()
    np.testing.assert_array_equal(np.load(target), np.arange(4))
    assert sorted(p.name for p in target.parent.iterdir()) == ["t.npy"]
    dangling = tmp_path / "dangling.npy"
    dangling.symlink_to(tmp_path / "data" / "new.npy")
    nio.write_npy(dangling, np.zeros(2))
    np.testing.assert_array_equal(np.load(tmp_path / "data" / "new.npy"), np.zeros(2))


def test_readers_take_bytes_paths_and_refuse_other_types(tmp_path: Path) -> None:
    sf.write(tmp_path / "a.wav", _noise(7, (50, 1)), 8000, subtype="FLOAT")
    np.save(tmp_path / "a.npy", _noise(8, (2, 30)))
    assert nio.read_audio(os.fsencode(tmp_path / "a.wav")).data.shape == (1, 50)
    assert nio.audio_info(os.fsencode(tmp_path / "a.wav"))["frames"] == 50
    assert nio.read_signal(os.fsencode(tmp_path / "a.npy"), default_rate=8000).data.shape == (2, 30)
    for read in (nio.read_audio, nio.audio_info, lambda p: nio.read_signal(p, default_rate=8000)):
        for bad in (None, 3):
            with pytest.raises(
                ParameterTypeError, match=f"path must be a file name: str, bytes or os.PathLike, got {bad}"
            ):
                read(bad)


@pytest.mark.parametrize(
    ("data", "error", "message"),
    [
        (
            np.full((5, 4, 6), 0.5),
            ParameterValueError,
            r"with 1, 3 or 4 channels, got .* shape \(5, 4, 6\)",
        ),
        (
            np.full((1, 2, 4, 6), 0.5),
            ParameterValueError,
            r"with 1, 3 or 4 channels, got .* shape \(1, 2, 4, 6\)",
        ),
        (
            np.full((64, 48, 3), 0.5),
            ParameterValueError,
            r"with 1, 3 or 4 channels, got .* shape \(64, 48, 3\)",
        ),
        (np.full((2, 4, 6), 0.5), ParameterValueError, "with 1, 3 or 4 channels"),
        (np.zeros((0, 6)), ParameterValueError, "at least one pixel"),
        (np.array([[0.5, np.nan]]), ParameterValueError, "finite values"),
        (np.full((4, 6), 0.5 + 0.5j), ParameterTypeError, "data must be real numbers in"),
    ],
    ids=["5ch", "4d", "hwc", "2ch", "empty", "nan", "complex"],
)
def test_write_image_refuses_what_it_cannot_write(
    tmp_path: Path, data: np.ndarray, error: type[Exception], message: str
) -> None:
    # These once became a raw PIL TypeError, a black pixel, or the real part.
    with pytest.raises(error, match=message):
        nio.write_image(tmp_path / "i.png", data)
    assert list(tmp_path.iterdir()) == []


def test_read_array_names_a_file_that_is_not_numpy(tmp_path: Path) -> None:
    # np.load takes any file without the .npy or zip signature for a pickle: a WAV or a text file was
    # said to hold "pickled (object) data" that allow_pickle could load "unsafely".
    for name, data in (("a.npy", b"RIFF\x24\x00\x00\x00WAVEfmt "), ("t.npz", b"hello, not numpy\n")):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(nio.InputFileError) as info:
            nio.read_array(tmp_path / name)
        assert (
            str(info.value)
            == f"{tmp_path / name}: not a NumPy .npy or .npz file (it starts with neither's signature)"
        )
        assert "pickle" not in str(info.value)


def test_write_audio_refuses_a_rate_no_header_holds(tmp_path: Path) -> None:
    # libsndfile's rate is a C int: soundfile failed with "integer 99999999999 does not fit 'int'".
    with pytest.raises(ParameterValueError, match="sample_rate must be at most 2147483647 Hz"):
        nio.write_audio(tmp_path / "a.wav", np.zeros(8, np.float32), 99_999_999_999)
    assert list(tmp_path.iterdir()) == []
    nio.write_audio(tmp_path / "a.wav", np.zeros(8, np.float32), 2**31 - 1)
    assert sf.info(tmp_path / "a.wav").samplerate == 2**31 - 1
