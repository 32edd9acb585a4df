"""The ``nbxsig`` commands through Click's CliRunner, on generated folders of tiny files.

Real subprocess runs (kill and resume, worker processes, progress off a terminal) are in
tests/test_cli_subprocess.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from _marks import suite_dependency
from click.testing import CliRunner
from nbxsig.cli.main import main

from nbxsig import io as nio
from nbxsig.testing import assert_close

# soundfile is not on the GPU machine's image; `make gpu-test` collects this module too (no gpu tests here).
sf = suite_dependency("soundfile")

RATE = 16000


def make_folder(root: Path) -> Path:
    """in/: good wav/flac/npy files and every kind of bad one."""
    rng = np.random.default_rng(7)
    d = root / "in"
    (d / "sub").mkdir(parents=True)
    sf.write(d / "a.wav", (0.2 * rng.standard_normal((2400, 2))).astype(np.float32), RATE, subtype="FLOAT")
    sf.write(d / "sub/b.flac", (0.2 * rng.standard_normal(2000)).astype(np.float32), RATE, subtype="PCM_16")
    sf.write(d / "c.wav", (0.2 * rng.standard_normal(2350)).astype(np.float32), RATE, subtype="PCM_16")
    np.save(d / "d.npy", (0.2 * rng.standard_normal((1, 900))).astype(np.float32))
    (d / "corrupt.wav").write_bytes(b"RIFF\x24\x00\x00\x00WAVEfmt garbage garbage garbage")
    (d / "empty.flac").write_bytes(b"")
    sf.write(d / "zero.wav", np.zeros((0, 1), np.float32), RATE)
    np.save(d / "nan.npy", np.full((1, 500), np.nan, np.float32))
    return d


GOOD = {"a.wav", "b.flac", "c.wav", "d.npy"}
BAD = {"corrupt.wav", "empty.flac", "zero.wav", "nan.npy"}


def hashes(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def invoke(*args: str | Path) -> object:
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    return result


def manifest(path: Path) -> dict[str, dict]:
    return {Path(r["input"]).name: r for r in map(json.loads, path.read_text().splitlines())}


def hann(n: int) -> torch.Tensor:
    return torch.hann_window(n, periodic=True, dtype=torch.float64)


# --------------------------------------------------------------------------------------------
# stft: the batch contract on a mixed folder


def test_stft_folder_keeps_going_and_reports(tmp_path: Path) -> None:
    src = make_folder(tmp_path)
    before = hashes(src)
    out = tmp_path / "out"
    result = invoke(
        "stft", src, "-o", out, "--n-fft", "64", "-j", "0", "--batch-size", "3", "--device", "cpu"
    )
    assert result.exit_code == 1, result.output
    rows = manifest(out / "manifest.jsonl")
    assert {n for n, r in rows.items() if r["status"] == "ok"} == GOOD
    assert {n for n, r in rows.items() if r["status"] == "failed"} == BAD
    assert "empty" in rows["empty.flac"]["error"] and "zero frames" in rows["zero.wav"]["error"]
    assert "not finite" in rows["nan.npy"]["error"] and "cannot decode" in rows["corrupt.wav"]["error"]
    assert rows["a.wav"]["sample_rate"] == RATE and rows["a.wav"]["samples"] == 2400
    assert "4 ok, 4 failed, 0 skipped in " in result.stderr
    assert "assuming 24000 Hz" in result.stderr  # d.npy carries no rate
    for name in BAD:
        assert f"nbxsig: failed: {src / name}: " in result.stderr
    # Outputs mirror the tree, failed inputs leave no output, inputs are unchanged.
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        "a.npz",
        "c.npz",
        "d.npz",
        "manifest.jsonl",
        "sub/b.npz",
    ]
    assert hashes(src) == before


def test_stft_batched_equals_torch_per_file(tmp_path: Path) -> None:
    src = make_folder(tmp_path)
    out = tmp_path / "out"
    invoke("stft", src, "-o", out, "--n-fft", "64", "--hop-length", "20", "--batch-size", "8", "-j", "0")
    for name, rel in (("a.wav", "a.npz"), ("c.wav", "c.npz"), ("b.flac", "sub/b.npz")):
        audio = nio.read_audio(next(src.rglob(name)))
        npz = np.load(out / rel)
        x = torch.from_numpy(audio.data).double()
        ref = torch.stft(x, 64, 20, window=hann(64), center=True, pad_mode="reflect", return_complex=True)
        assert npz["spec"].dtype == np.complex64 and npz["spec"].shape == tuple(ref.shape)
        assert_close(torch.from_numpy(npz["spec"]).to(torch.complex128), ref, dtype="float32")
        assert (npz["n_fft"], npz["hop_length"], npz["win_length"], str(npz["window"])) == (
            64,
            20,
            64,
            "hann",
        )
        assert (bool(npz["center"]), int(npz["length"]), int(npz["sample_rate"])) == (
            True,
            audio.samples,
            RATE,
        )


@pytest.mark.parametrize(
    "flags",
    [
        ["--no-center"],
        ["--pad-mode", "constant", "--window", "hamming", "--win-length", "48"],
        ["--normalized"],
    ],
    ids=["no-center", "constant-hamming-win48", "normalized"],
)
def test_stft_options_match_torch(tmp_path: Path, flags: list[str]) -> None:
    x = np.random.default_rng(3).standard_normal((1, 1000)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    result = invoke("stft", tmp_path / "x.npy", "--n-fft", "64", "--hop-length", "16", *flags, "-q")
    assert result.exit_code == 0, result.output
    spec = np.load(tmp_path / "x.npz")["spec"]
    win = 48 if "48" in flags else 64
    window = (torch.hamming_window if "hamming" in flags else torch.hann_window)(win, periodic=True).double()
    ref = torch.stft(
        torch.from_numpy(x).double(),
        64,
        16,
        win,
        window=window,
        center="--no-center" not in flags,
        pad_mode="constant" if "constant" in flags else "reflect",
        normalized="--normalized" in flags,
        return_complex=True,
    )
    assert_close(torch.from_numpy(spec).to(torch.complex128), ref, dtype="float32")


def test_truncated_wav_is_reported_not_processed(tmp_path: Path) -> None:
    # A copy cut short decodes as a shorter file; the batch must report it, not write its features.
    src = make_folder(tmp_path)
    whole = (src / "c.wav").read_bytes()
    (src / "cut.wav").write_bytes(whole[: len(whole) // 2])
    out = tmp_path / "out"
    result = invoke("mel", src / "c.wav", src / "cut.wav", "-o", out, "-j", "0", "--device", "cpu")
    assert result.exit_code == 1
    rows = manifest(out / "manifest.jsonl")
    assert rows["c.wav"]["status"] == "ok" and rows["cut.wav"]["status"] == "failed"
    assert "truncated: the header declares 4700 bytes of audio" in rows["cut.wav"]["error"]
    assert not (out / "cut.npy").exists()


def test_rerun_skips_existing_and_overwrite_redoes(tmp_path: Path) -> None:
    src = make_folder(tmp_path)
    out = tmp_path / "out"
    invoke("stft", src, "-o", out, "--n-fft", "32", "-j", "0")
    stamp = (out / "a.npz").stat().st_mtime_ns
    result = invoke("stft", src, "-o", out, "--n-fft", "32", "-j", "0")
    assert "0 ok, 4 failed, 4 skipped" in result.stderr
    assert (out / "a.npz").stat().st_mtime_ns == stamp
    assert {r["status"] for n, r in manifest(out / "manifest.jsonl").items() if n in GOOD} == {"skipped"}
    result = invoke("stft", src, "-o", out, "--n-fft", "32", "-j", "0", "--overwrite", "--glob", "*.wav")
    assert "2 ok, 2 failed, 0 skipped" in result.stderr  # a, c ok; corrupt, zero failed
    assert (out / "a.npz").stat().st_mtime_ns != stamp


def test_unwritable_output_folder(tmp_path: Path) -> None:
    src = make_folder(tmp_path)
    (tmp_path / "blocker").write_text("a regular file where the output folder's parent should be")
    result = invoke(
        "stft", src, "--glob", "*.wav", "-o", tmp_path / "blocker/out", "--n-fft", "32", "-j", "0"
    )
    assert result.exit_code == 1
    assert "0 ok, 4 failed" in result.stderr  # a.wav, c.wav cannot be written; corrupt/zero fail to decode
    assert "cannot write the manifest" in result.stderr
    assert result.stderr.count("blocker/out") >= 2


def test_quiet_prints_failures_only(tmp_path: Path) -> None:
    src = make_folder(tmp_path)
    result = invoke("stft", src / "a.wav", src / "corrupt.wav", "-o", tmp_path / "o", "--n-fft", "32", "-q")
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"nbxsig: failed: {src / 'corrupt.wav'}: ")
    assert result.stdout == ""


def test_shards_split_the_work(tmp_path: Path) -> None:
    src = make_folder(tmp_path)
    done: list[str] = []
    for k in (1, 2, 3):
        invoke("stft", src, "-o", tmp_path / f"o{k}", "--n-fft", "32", "-j", "0", "--shard", f"{k}/3")
        done += [p.name for p in (tmp_path / f"o{k}").rglob("*.npz")]
    assert sorted(done) == ["a.npz", "b.npz", "c.npz", "d.npz"]


def test_list_input_and_single_file_output(tmp_path: Path) -> None:
    src = make_folder(tmp_path)
    (tmp_path / "list.txt").write_text("in/a.wav\nin/sub\n")
    result = invoke("stft", f"@{tmp_path / 'list.txt'}", "-o", tmp_path / "o", "--n-fft", "32", "-j", "0")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "o").rglob("*.npz")) == ["a.npz", "b.npz"]
    result = invoke("stft", src / "c.wav", "-o", tmp_path / "one.npz", "--n-fft", "32")
    assert result.exit_code == 0 and (tmp_path / "one.npz").is_file()


def test_output_folder_inside_the_input_is_not_reprocessed(tmp_path: Path) -> None:
    src = make_folder(tmp_path)
    invoke("resample", src, "--glob", "*.wav", "-o", src / "out", "--rate", "8000")
    result = invoke("resample", src, "--glob", "*.wav", "-o", src / "out", "--rate", "8000")
    assert "0 ok, 2 failed, 2 skipped" in result.stderr  # out/*.wav were not taken as inputs


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["stft", "{src}/nothing-here", "--n-fft", "8"], "no input files"),
        (["stft", "{src}", "--n-fft", "8", "--shard", "3/2"], "--shard"),
        (["stft", "{src}", "--n-fft", "8", "--device", "tpu"], "--device"),
        (["stft", "{src}"], "--n-fft"),
        (["stft", "{src}", "--n-fft", "8", "--win-length", "9"], "--win-length"),
        (["filter", "{src}", "--lowpass", "100", "--sobel"], "exactly one"),
        (["filter", "{src}"], "exactly one"),
        (["resample", "{src}", "--rate", "8000"], "-o"),
        (["mel", "{src}", "--whisper", "--n-mels", "64"], "80 or 128"),
        (["bench", "no-such-suite"], "unknown suite"),
        (["stft", "{src}", "--n-fft", "8", "--glob", "/tmp/*"], "--glob must be a pattern relative"),
        (["info", "{src}", "--glob", "/tmp/*"], "--glob must be a pattern relative"),
        (["stft", "{src}/a.wav", "--n-fft", "8", "-o", "{src}/spec.wav"], "must end with .npz, not .wav"),
        (["mel", "{src}/a.wav", "-o", "{src}/mel.wav"], "must end with .npy, not .wav"),
        (["mel", "{src}/a.wav", "-o", "{src}/mel"], "not (no extension)"),
        (["resample", "{src}/a.wav", "--rate", "8000", "-o", "{src}/r8.png"], "not .png"),
        (["filter", "{src}/a.wav", "--lowpass", "100", "-o", "{src}/weird.txt"], "not .txt"),
        (["filter", "{src}/a.wav", "--lowpass", "100", "-o", "{src}/a.png"], "not .png"),
        (["vad", "{src}/a.wav", "-o", "{src}/v.png"], "must end with .json"),
        (["istft", "{src}/d.npy", "-o", "{src}/b.mp3"], "not .mp3"),
        (["istft", "{src}/d.npy", "--subtype", "float", "-o", "{src}/b.flac"], "not .flac"),
        (["vad", "{src}", "--min-level-db", "nan"], "'nan' is not a finite number"),
        (["vad", "{src}", "--threshold-db", "inf"], "'inf' is not a finite number"),
        (["filter", "{src}", "--lowpass", "nan"], "--lowpass"),
        (["filter", "{src}", "--bandpass", "100", "inf"], "--bandpass"),
        (["mel", "{src}", "--f-max", "nan"], "--f-max"),
        (["mel", "{src}", "--f-min", "5000", "--f-max", "1000"], "--f-min"),
        (
            ["mel", "{src}", "--sample-rate", "8000", "--f-min", "4000"],
            "of 8000 Hz audio (4000 Hz), got 4000",
        ),
        (
            ["mel", "{src}", "--sample-rate", "8001", "--f-min", "4000.2"],
            "of 8001 Hz audio (4000 Hz), got 4000.2",
        ),
        (["mel", "{src}", "--f-min", "1000", "--f-max", "1000"], "below --f-max (1000.0 Hz)"),
        (["mel", "{src}", "--n-mels", "1000000000"], "at most 402 mels at --n-fft 400"),
        (["stft", "{src}", "--n-fft", "3"], "--hop-length: hop_length must be >= 1 (the default n_fft // 4"),
        (["filter", "{src}", "--highpass", "100", "--numtaps", "100"], "--numtaps: numtaps must be odd"),
        (["mel", "{src}", "--whisper", "--n-fft", "512"], "drop --n-fft"),
        (["mel", "{src}", "--whisper", "--hop-length", "160", "--log"], "drop --hop-length, --log"),
        (["mel", "{src}", "--whisper", "--sample-rate", "16000"], "drop --sample-rate"),
    ],
    ids=[
        "nothing-found",
        "bad-shard",
        "bad-device",
        "missing-n-fft",
        "win-gt-nfft",
        "two-filters",
        "no-filter",
        "resample-no-output",
        "whisper-mels",
        "bench-suite",
        "stft-absolute-glob",
        "info-absolute-glob",
        "stft-o-wav",
        "mel-o-wav",
        "mel-o-no-extension",
        "resample-o-png",
        "filter-o-txt",
        "filter-audio-o-png",
        "vad-o-png",
        "istft-o-mp3",
        "istft-float-o-flac",
        "vad-nan-level",
        "vad-inf-threshold",
        "filter-nan-lowpass",
        "filter-inf-bandpass",
        "mel-nan-f-max",
        "mel-f-min-above-f-max",
        "mel-f-min-at-nyquist",
        "mel-f-min-at-odd-rate-nyquist",
        "mel-empty-band",
        "mel-too-many-mels",
        "stft-no-default-hop",
        "filter-highpass-even-taps",
        "whisper-n-fft",
        "whisper-hop-log",
        "whisper-sample-rate",
    ],
)
def test_usage_errors_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    src = make_folder(tmp_path)
    (src / "nothing-here").mkdir()
    before = hashes(tmp_path)
    result = invoke(*(a.format(src=src) for a in args))
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert hashes(tmp_path) == before  # nothing written, nothing changed


# --------------------------------------------------------------------------------------------
# nothing the user gave is overwritten; folder runs resume


@pytest.mark.parametrize(
    ("extra", "given"),
    [
        (["--manifest", "{src}/a.wav"], "a.wav"),
        (["--manifest", "{tmp}/list.txt"], "list.txt"),
        (["--manifest", "{src}/nan.npy"], "nan.npy"),  # found in a folder, not named
        (["--manifest", "{tmp}/taps.npy", "--taps", "{tmp}/taps.npy"], "taps.npy"),
        (["--manifest", "{tmp}/out/a.wav"], None),  # an output
    ],
    ids=["input", "list-file", "found-in-folder", "taps", "output"],
)
def test_the_manifest_never_replaces_what_the_user_gave(tmp_path: Path, extra: list[str], given: str) -> None:
    src = make_folder(tmp_path)
    np.save(tmp_path / "taps.npy", np.array([0.25, 0.5, 0.25]))
    (tmp_path / "list.txt").write_text("in/a.wav\nin\n")
    args = [f"@{tmp_path / 'list.txt'}", "-o", tmp_path / "out", "--sample-rate", str(RATE)]
    before = hashes(tmp_path)
    filters = ["--taps", f"{tmp_path / 'taps.npy'}"] if "--taps" not in extra else []
    result = invoke("filter", *args, *filters, *(a.format(src=src, tmp=tmp_path) for a in extra))
    assert result.exit_code == 2, result.output
    assert "--manifest" in result.stderr
    assert (f"would overwrite the input {given}" if given else "also the output of") in result.stderr.replace(
        f"{tmp_path}/", ""
    ).replace("in/", "")
    assert hashes(tmp_path) == before


def test_an_output_folder_at_or_above_the_input_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "t/in").mkdir(parents=True)
    sf.write(tmp_path / "t/in/a.wav", np.zeros(400, np.float32), RATE)
    monkeypatch.chdir(tmp_path / "t")
    for out, written in (("./", "a.npz"), ("in/", "in/a.npz"), ("..", "../a.npz")):
        result = invoke("stft", "in/", "--n-fft", "64", "-o", out, "-j", "0")
        assert result.exit_code == 0 and "1 ok, 0 failed" in result.stderr, (out, result.output)
        assert Path(written).is_file()
    # Resumed, with outputs beside the inputs in the folder searched.
    assert "0 ok, 0 failed, 1 skipped" in invoke("stft", "in/", "--n-fft", "64", "-o", "in/").stderr
    # Everything found is under the output folder: nothing to do is a usage error, not "0 ok".
    result = invoke("stft", ".", "--n-fft", "64", "-o", "in/", "--glob", "in/*.wav")
    assert result.exit_code == 2 and "no input files" in result.stderr


def test_a_second_run_beside_the_inputs_resumes_and_takes_no_outputs_as_inputs(tmp_path: Path) -> None:
    src = tmp_path / "c"
    src.mkdir()
    sf.write(src / "a.wav", 0.1 * np.random.default_rng(1).standard_normal(4000).astype(np.float32), RATE)
    assert invoke("mel", src, "-j", "0").exit_code == 0
    mel = (src / "a.npy").read_bytes()
    result = invoke("mel", src, "-j", "0")
    assert result.exit_code == 0 and "0 ok, 0 failed, 1 skipped" in result.stderr
    # vad takes a.wav, not mel's (1, 80, T) a.npy as an 80-channel waveform.
    result = invoke("vad", src, "-j", "0")
    assert result.exit_code == 0 and "1 ok, 0 failed, 0 skipped" in result.stderr
    assert sorted(p.name for p in src.iterdir()) == ["a.json", "a.npy", "a.wav"]
    # a.npy may be the user's: --overwrite does not replace a file found in the input folder.
    result = invoke("mel", src, "-j", "0", "--overwrite")
    assert result.exit_code == 1 and f"refusing to overwrite {src / 'a.npy'}" in result.stderr
    assert (src / "a.npy").read_bytes() == mel


@pytest.mark.parametrize("named", [False, True], ids=["folder", "named"])
def test_shards_never_replace_another_shards_input(tmp_path: Path, named: bool) -> None:
    src = tmp_path / "sh"
    src.mkdir()
    sf.write(src / "a.wav", np.zeros(4000, np.float32), RATE)
    np.save(src / "a.npy", np.ones((1, 1000), np.float32))  # the user's waveform
    before = hashes(src)
    inputs = [src / "a.wav", src / "a.npy", "-o", f"{src}/"] if named else [src]
    codes = [
        invoke("mel", *inputs, "--shard", f"{k}/3", "--overwrite", "-j", "0").exit_code for k in (1, 2, 3)
    ]
    assert {k: v for k, v in hashes(src).items() if k in before} == before and 1 in codes


def test_istft_default_output_is_not_the_audio_it_came_from(tmp_path: Path) -> None:
    src = make_folder(tmp_path)
    before = hashes(src)
    assert invoke("stft", src / "a.wav", "--n-fft", "64").exit_code == 0
    result = invoke("istft", src / "a.npz", "--overwrite")
    assert result.exit_code == 0 and "1 ok" in result.stderr, result.output
    assert nio.read_audio(src / "a.istft.wav").data.shape == (2, 2400)
    assert {k: v for k, v in hashes(src).items() if k in before} == before


def test_istft_takes_a_two_sided_spectrum(tmp_path: Path) -> None:
    # F = n_fft bins: torch.istft's onesided=False, which the library infers; the CLI takes it too.
    x = torch.randn(2, 400, dtype=torch.float64)
    spec = torch.stft(x, 16, 4, window=hann(16), return_complex=True, onesided=False)
    np.save(tmp_path / "two.npy", spec.to(torch.complex64).numpy())
    result = invoke("istft", tmp_path / "two.npy", "--n-fft", "16", "--length", "400", "--sample-rate", RATE)
    assert result.exit_code == 0 and "1 ok" in result.stderr, result.output
    out = torch.from_numpy(nio.read_audio(tmp_path / "two.istft.wav").data).double()
    assert (out - x).abs().max() < 1e-5


def test_a_shard_writes_its_own_default_manifest(tmp_path: Path) -> None:
    # Shards sharing -o run at once: one default manifest name would have them replace each other's.
    src = make_folder(tmp_path)
    out = tmp_path / "out"
    for k in (1, 2):
        invoke("stft", src, "--n-fft", "64", "-o", out, "--shard", f"{k}/2", "-j", "0")  # bad files: exit 1
    rows = [manifest(out / f"manifest.shard-{k}-of-2.jsonl") for k in (1, 2)]
    assert not rows[0].keys() & rows[1].keys() and rows[0].keys() | rows[1].keys() >= GOOD
    assert all(rows[k][name]["status"] == "ok" for k in (0, 1) for name in rows[k].keys() & GOOD)
    assert not (out / "manifest.jsonl").exists()


def test_arrays_set_aside_are_announced(tmp_path: Path) -> None:
    src = tmp_path / "c"
    src.mkdir()
    sf.write(src / "a.wav", np.random.default_rng(0).standard_normal(4000).astype(np.float32), RATE)
    np.save(src / "a.npy", np.ones((1, 1000), np.float32))
    result = invoke("stft", src, "--n-fft", "64", "-j", "0")
    assert "left alone: 1 array file(s) beside audio" in result.stderr and str(src / "a.npy") in result.stderr
    assert "left alone" not in invoke("stft", src, "--n-fft", "64", "-j", "0", "-q").stderr


@pytest.mark.parametrize(
    ("taps", "message"),
    [
        ("nope.npy", "no such file"),
        ("folder", "not a regular file"),
        ("cut.npy", "cannot load"),
        ("nan.npy", "not finite"),
        ("empty.npy", "holds no taps"),
        ("two_d.npy", "1-D float array"),
    ],
    ids=["missing", "folder", "truncated", "nan", "empty", "2-D"],
)
def test_filter_bad_taps_are_usage_errors(tmp_path: Path, taps: str, message: str) -> None:
    src = make_folder(tmp_path)
    (tmp_path / "folder").mkdir()
    np.save(tmp_path / "good.npy", np.ones(9) / 9)
    (tmp_path / "cut.npy").write_bytes((tmp_path / "good.npy").read_bytes()[:-20])
    np.save(tmp_path / "nan.npy", np.array([0.5, np.nan]))
    np.save(tmp_path / "empty.npy", np.zeros(0))
    np.save(tmp_path / "two_d.npy", np.ones((3, 3)))
    result = invoke("filter", src / "a.wav", "--taps", tmp_path / taps, "-o", tmp_path / "f.wav")
    assert result.exit_code == 2 and "Invalid value for --taps" in result.stderr and message in result.stderr
    assert not (tmp_path / "f.wav").exists()


def test_inputs_missing_linked_and_named_oddly(tmp_path: Path) -> None:
    src = tmp_path / "d"
    src.mkdir()
    sf.write(src / "a.wav", np.zeros(400, np.float32), RATE)
    (src / "b.wav").symlink_to("a.wav")  # an input of its own, under its own name
    (src / "gone.wav").symlink_to("nowhere.wav")
    (src / os.fsdecode(b"g\xff.wav")).write_bytes((src / "a.wav").read_bytes())  # a name that is not UTF-8
    result = invoke("stft", src, "--n-fft", "64", "-j", "0")
    # ascii(): the output holds the name that is not UTF-8, which pytest-xdist cannot carry in a report.
    assert result.exit_code == 1 and "3 ok, 1 failed" in result.stderr, ascii(result.output)
    assert "gone.wav: no such file (a broken symbolic link to nowhere.wav)" in result.stderr
    assert (src / "b.npz").is_file() and (src / os.fsdecode(b"g\xff.npz")).is_file()
    result = invoke("info", src, "--glob", "g?.*")
    assert result.exit_code == 0 and "g\ufffd.wav: audio WAV" in result.stdout, ascii(result.output)
    result = invoke("stft", tmp_path / "nope/", "--n-fft", "64")
    assert result.exit_code == 1 and "nope: no such file" in result.stderr


def test_inputs_failing_over_one_output_are_each_named(tmp_path: Path) -> None:
    # Every failure line starts with its input: the two losers of a.npz printed one line twice,
    # naming only the winner and the output.
    src = tmp_path / "c"
    src.mkdir()
    for ext in ("wav", "flac", "ogg"):
        sf.write(src / f"a.{ext}", np.zeros(4000, np.float32), RATE)
    result = invoke("stft", src, "--n-fft", "64", "-j", "0")
    assert result.exit_code == 1 and "1 ok, 2 failed" in result.stderr, result.output
    for loser in ("a.ogg", "a.wav"):
        reason = f"its output {src / 'a.npz'} is also the output of {src / 'a.flac'}"
        assert f"nbxsig: failed: {src / loser}: {reason}" in result.stderr.splitlines()


def test_an_unwritable_manifest_is_a_nonzero_exit(tmp_path: Path) -> None:
    src = make_folder(tmp_path)
    (tmp_path / "blocker").write_text("a regular file where the manifest's folder should be")
    args = ["stft", src / "a.wav", "--n-fft", "64", "-o", tmp_path / "a.npz"]
    result = invoke(*args, "--manifest", tmp_path / "blocker/m.jsonl")
    # The output is written, its record is not: exit 0 would send a script to read a missing manifest.
    assert result.exit_code == 1 and "1 ok, 0 failed" in result.stderr, result.output
    where = tmp_path / "blocker/m.jsonl"
    assert f"nbxsig: cannot write the manifest {where}: Not a directory" in result.stderr
    assert (tmp_path / "a.npz").is_file()
    assert invoke(*args, "--overwrite", "--manifest", tmp_path / "m.jsonl").exit_code == 0


def test_write_failures_name_the_output(tmp_path: Path) -> None:
    src = make_folder(tmp_path)
    (tmp_path / "afile").write_text("a regular file")
    result = invoke("stft", src / "a.wav", "--n-fft", "64", "-o", tmp_path / "afile/x.npz")
    assert result.exit_code == 1 and f"Not a directory: {tmp_path / 'afile/x.npz'}" in result.stderr
    assert ".tmp-" not in result.stderr
    (src / "c.npz").mkdir()  # the output's name is taken by a folder
    for flags in ([], ["--overwrite"]):
        result = invoke("stft", src / "c.wav", "--n-fft", "64", *flags)
        assert result.exit_code == 1 and f"{src / 'c.npz'}: the output is an existing folder" in result.stderr


# --------------------------------------------------------------------------------------------
# istft


def test_istft_npy_n_fft_20_as_is_matches_torch(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(11)
    spec = torch.randn(11, 60, dtype=torch.complex64, generator=g)
    np.save(tmp_path / "input.npy", spec.numpy())
    result = invoke("istft", tmp_path / "input.npy", "--n-fft", "20")
    assert result.exit_code == 0, result.output
    assert "24000 Hz" in result.stderr
    audio = nio.read_audio(tmp_path / "input.istft.wav")
    assert audio.sample_rate == 24000 and audio.subtype == "FLOAT"
    ref = torch.istft(spec.to(torch.complex128), 20, 5, window=hann(20), center=True)
    assert_close(torch.from_numpy(audio.data[0]).double(), ref, dtype="float32")


def test_istft_real_layout_leading_dims_and_npy_output(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(12)
    spec = torch.randn(2, 3, 17, 25, dtype=torch.complex64, generator=g)
    np.save(tmp_path / "s.npy", torch.view_as_real(spec).numpy())
    result = invoke(
        "istft", tmp_path / "s.npy", "-o", tmp_path / "w.npy", "--hop-length", "8", "--length", "190"
    )
    assert result.exit_code == 0, result.output
    assert "n_fft = 2 * (bins - 1) = 32" in result.stderr
    got = np.load(tmp_path / "w.npy")
    ref = torch.istft(spec.reshape(6, 17, 25).to(torch.complex128), 32, 8, window=hann(32), length=190)
    assert got.shape == (2, 3, 190)
    assert_close(torch.from_numpy(got).reshape(6, 190).double(), ref, dtype="float32")


def test_istft_bad_inputs(tmp_path: Path) -> None:
    np.save(tmp_path / "wrong_bins.npy", np.ones((10, 8), np.complex64))
    np.save(tmp_path / "int.npy", np.ones((10, 8), np.int32))
    np.save(tmp_path / "nan.npy", np.full((11, 8), np.nan, np.complex64))
    np.savez(tmp_path / "nospec.npz", x=np.ones(3))
    result = invoke("istft", tmp_path, "-o", tmp_path / "o", "--n-fft", "20", "-j", "0")
    assert result.exit_code == 1
    rows = manifest(tmp_path / "o/manifest.jsonl")
    assert {r["status"] for r in rows.values()} == {"failed"}
    assert "n_fft" in rows["wrong_bins.npy"]["error"]  # nbxsig.stft names the mismatch
    assert "complex or real floating" in rows["int.npy"]["error"]
    assert "not finite" in rows["nan.npy"]["error"] and "'spec'" in rows["nospec.npz"]["error"]


def test_stft_istft_round_trip_without_flags(tmp_path: Path) -> None:
    src = make_folder(tmp_path)
    assert invoke("stft", src / "a.wav", "-o", tmp_path / "a.npz", "--n-fft", "128").exit_code == 0
    result = invoke("istft", tmp_path / "a.npz", "-o", tmp_path / "rt.wav")
    assert result.exit_code == 0, result.output
    assert "assuming" not in result.stderr  # everything came from the .npz
    orig, back = nio.read_audio(src / "a.wav"), nio.read_audio(tmp_path / "rt.wav")
    assert back.sample_rate == orig.sample_rate and back.data.shape == orig.data.shape
    assert_close(torch.from_numpy(back.data), torch.from_numpy(orig.data), dtype="float32")


def test_istft_writes_formats_without_float_in_their_default_subtype(tmp_path: Path) -> None:
    src = make_folder(tmp_path)
    assert invoke("stft", src / "c.wav", "-o", tmp_path / "c.npz", "--n-fft", "64").exit_code == 0
    for name, subtype in (("b.flac", "PCM_16"), ("b.ogg", "VORBIS"), ("b.wav", "FLOAT")):
        result = invoke("istft", tmp_path / "c.npz", "-o", tmp_path / name)
        assert result.exit_code == 0, result.output
        assert nio.audio_info(tmp_path / name)["subtype"] == subtype


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"sample_rate": 0}, "the .npz's sample_rate must be a positive integer, got 0"),
        ({"n_fft": -4}, "the .npz's n_fft must be a positive integer, got -4"),
        ({"n_fft": "abc"}, "the .npz's n_fft must be a positive integer, got 'abc'"),
        ({"hop_length": 2.5}, "the .npz's hop_length must be a positive integer, got 2.5"),
        ({"center": "yes"}, "the .npz's center must be a boolean, got 'yes'"),
        ({"window": "kaiser"}, "window 'kaiser' is not one of"),
        ({"n_fft": 128}, "n_fft 128 does not fit a spectrum of 33 bins"),
        ({"win_length": 100}, "win_length 100 exceeds n_fft 64"),
        (
            {"n_fft": 2, "hop_length": None},
            "hop_length must be >= 1 (the default n_fft // 4 is 0 for n_fft=2; pass it), got 0 "
            "(--hop-length)",
        ),
        ({"spec": "one frame"}, "1 frame(s) give no samples"),
        # An array where a value belongs was left out as missing: the default n_fft, without a word.
        ({"n_fft": [64, 64]}, "the .npz's n_fft must be a positive integer, got an array of shape (2,)"),
    ],
    ids=[
        "rate-0",
        "n_fft-negative",
        "n_fft-text",
        "hop-float",
        "center-text",
        "window",
        "bins",
        "win",
        "no-default-hop",
        "1-frame",
        "n_fft-array",
    ],
)
def test_istft_refuses_bad_parameters_stored_in_the_npz(tmp_path: Path, change: dict, message: str) -> None:
    src = make_folder(tmp_path)
    assert invoke("stft", src / "c.wav", "-o", tmp_path / "c.npz", "--n-fft", "64").exit_code == 0
    arrays = dict(np.load(tmp_path / "c.npz"))
    if change == {"spec": "one frame"}:
        arrays["spec"] = arrays["spec"][..., :1]
        del arrays["length"]
    else:
        arrays.update({k: np.asarray(v) for k, v in change.items() if v is not None})
        for key in [k for k, v in change.items() if v is None]:
            del arrays[key]
    if "n_fft" in change and change["n_fft"] == 2:  # a two-bin spectrum
        arrays["spec"] = arrays["spec"][:, :2]
    np.savez(tmp_path / "bad.npz", **arrays)
    result = invoke("istft", tmp_path / "bad.npz", "-o", tmp_path / "out.wav")
    assert result.exit_code == 1 and f"nbxsig: failed: {tmp_path / 'bad.npz'}: {message}" in result.stderr
    assert not (tmp_path / "out.wav").exists()


# --------------------------------------------------------------------------------------------
# info, filter, resample, plot, bench


def test_info(tmp_path: Path) -> None:
    src = make_folder(tmp_path)
    nio.write_image(src / "i.png", np.zeros((3, 4, 5)))
    result = invoke("info", src)
    assert result.exit_code == 1  # corrupt and empty files
    assert f"{src / 'a.wav'}: audio WAV FLOAT, 16000 Hz, 2 ch, 2400 frames, 0.150 s" in result.stdout
    assert f"{src / 'd.npy'}: array float32 (1, 900)" in result.stdout
    assert f"{src / 'i.png'}: image PNG RGB, 5×4" in result.stdout
    assert "empty" in result.stderr and "cannot decode" in result.stderr
    result = invoke("info", "--json", src / "sub/b.flac")
    assert result.exit_code == 0
    row = json.loads(result.stdout)
    assert (row["sample_rate"], row["channels"], row["frames"], row["subtype"]) == (RATE, 1, 2000, "PCM_16")


def _tone(freqs: list[float], n: int = 8000) -> np.ndarray:
    t = np.arange(n) / RATE
    return sum(0.3 * np.sin(2 * np.pi * f * t) for f in freqs).astype(np.float32)[None]


def _level_db(x: np.ndarray, f: float) -> float:
    spectrum = np.abs(np.fft.rfft(x[0, 1000:-1000] * np.hanning(x.shape[-1] - 2000)))
    k = round(f * (x.shape[-1] - 2000) / RATE)
    return 20 * np.log10(spectrum[k - 2 : k + 3].max() + 1e-12)


@pytest.mark.parametrize(
    ("flags", "kept", "stopped"),
    [
        (["--lowpass", "1000"], 300.0, 5000.0),
        (["--highpass", "3000"], 5000.0, 300.0),
        (["--bandpass", "1000", "3000"], 2000.0, 300.0),
    ],
    ids=["lowpass", "highpass", "bandpass"],
)
def test_filter_audio(tmp_path: Path, flags: list[str], kept: float, stopped: float) -> None:
    x = _tone([300.0, 2000.0, 5000.0])
    nio.write_audio(tmp_path / "in/t.wav", x, RATE, subtype="FLOAT")
    result = invoke("filter", tmp_path / "in", "-o", tmp_path / "out", *flags)
    assert result.exit_code == 0, result.output
    y = nio.read_audio(tmp_path / "out/t.wav")
    assert y.subtype == "FLOAT" and y.data.shape == x.shape
    assert abs(_level_db(y.data, kept) - _level_db(x, kept)) < 0.5  # passband kept (and not delayed away)
    assert _level_db(y.data, stopped) < _level_db(x, stopped) - 40  # stopband down by > 40 dB
    # Linear phase with the delay removed: the output is the passband tone, in phase with the input's. (A
    # sample of delay left is a correlation of cos(2π·300/16000) = 0.993 at the slowest kept tone.)
    lp = np.corrcoef(y.data[0, 2000:6000], _tone([kept])[0, 2000:6000])[0, 1]
    assert lp > 0.999, lp


def test_filter_taps_file_equals_convolution(tmp_path: Path) -> None:
    x = np.random.default_rng(2).standard_normal((1, 400)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    taps = np.array([0.25, 0.5, 0.25, 0.1, -0.1], np.float64)
    np.save(tmp_path / "taps.npy", taps)
    result = invoke(
        "filter",
        tmp_path / "x.npy",
        "-o",
        tmp_path / "y.npy",
        "--taps",
        tmp_path / "taps.npy",
        "--sample-rate",
        "8000",
    )
    assert result.exit_code == 0, result.output
    full = np.convolve(x[0].astype(np.float64), taps)  # delay (K-1)//2 = 2 removed
    np.testing.assert_allclose(np.load(tmp_path / "y.npy")[0], full[2 : 2 + 400], atol=1e-5)


def test_filter_npy_without_rate_fails_that_file(tmp_path: Path) -> None:
    np.save(tmp_path / "x.npy", np.ones((1, 50), np.float32))
    result = invoke("filter", tmp_path / "x.npy", "-o", tmp_path / "y.npy", "--lowpass", "100")
    assert result.exit_code == 1 and "--sample-rate" in result.stderr


def test_filter_images(tmp_path: Path) -> None:
    import nbxsig.filters as nf

    img = np.random.default_rng(4).random((3, 20, 24)).astype(np.float32)
    nio.write_image(tmp_path / "in/p.png", img)
    nio.write_image(tmp_path / "in/q.png", img[:, :10])
    result = invoke("filter", tmp_path / "in", "-o", tmp_path / "out", "--gaussian", "1.5")
    assert result.exit_code == 0, result.output
    src = torch.from_numpy(nio.read_image(tmp_path / "in/p.png"))[None]
    ref = nf.gaussian_blur2d(src, (11, 11), (1.5, 1.5))[0].numpy()
    np.testing.assert_allclose(nio.read_image(tmp_path / "out/p.png"), ref, atol=0.5 / 255 + 1e-6)
    assert nio.read_image(tmp_path / "out/q.png").shape == (3, 10, 24)
    for flag in (["--box", "3"], ["--sobel"], ["--unsharp", "1.0"]):
        result = invoke("filter", tmp_path / "in/p.png", "-o", tmp_path / "o.jpg", "--overwrite", *flag)
        assert result.exit_code == 0, result.output
    result = invoke("filter", tmp_path / "in/p.png", "-o", tmp_path / "x.wav", "--lowpass", "100")
    assert result.exit_code == 1 and "not images" in result.stderr


def test_resample_refuses_images(tmp_path: Path) -> None:
    nio.write_image(tmp_path / "p.png", np.zeros((1, 8, 8)))
    result = invoke("resample", tmp_path / "p.png", "--rate", "8000", "-o", tmp_path / "r.wav")
    assert result.exit_code == 1 and "unsupported input type (expected audio or a .npy" in result.stderr
    assert "Traceback" not in result.output and not (tmp_path / "r.wav").exists()


def test_resample_matches_torchaudio(tmp_path: Path) -> None:
    import torchaudio.functional as AF

    src = make_folder(tmp_path)
    result = invoke(
        "resample",
        src,
        "--glob",
        "**/*.*",
        "-o",
        tmp_path / "out",
        "--rate",
        "22050",
        "--sample-rate",
        "16000",
        "-j",
        "0",
    )
    assert result.exit_code == 1  # the bad files
    rows = manifest(tmp_path / "out/manifest.jsonl")
    assert {n for n, r in rows.items() if r["status"] == "ok"} == GOOD
    for name in ("a.wav", "c.wav", "d.npy"):
        x = nio.read_signal(src / name, default_rate=RATE)
        out = tmp_path / "out" / name
        y = nio.read_audio(out).data if name.endswith(".wav") else np.load(out)
        ref = AF.resample(torch.from_numpy(x.data).double(), RATE, 22050).numpy()
        atol = 1e-6 if name != "c.wav" else 1 / 32768
        np.testing.assert_allclose(y, ref, atol=atol + 1e-5)
    assert nio.audio_info(tmp_path / "out/c.wav")["subtype"] == "PCM_16"  # subtype kept
    assert nio.audio_info(tmp_path / "out/a.wav")["sample_rate"] == 22050


def test_plot(tmp_path: Path) -> None:
    src = make_folder(tmp_path)
    invoke("stft", src / "a.wav", "-o", tmp_path / "a.npz", "--n-fft", "64")
    (tmp_path / "seg.json").write_text('[[0.01, 0.05], {"start": 0.08, "end": 0.1}]')
    result = invoke(
        "plot",
        src / "a.wav",
        src / "d.npy",
        tmp_path / "a.npz",
        src / "corrupt.wav",
        "-o",
        tmp_path / "plots",
        "--segments",
        tmp_path / "seg.json",
        "-j",
        "0",
    )
    assert result.exit_code == 1
    pngs = sorted(p.relative_to(tmp_path / "plots").as_posix() for p in (tmp_path / "plots").rglob("*.png"))
    assert pngs == ["a.png", "in/a.png", "in/d.png"]
    from PIL import Image

    with Image.open(tmp_path / "plots/in/a.png") as im:
        assert im.format == "PNG" and im.width >= 600
    # A binary file as --segments: a usage error in words, not the UTF-8 codec's byte offsets.
    result = invoke("plot", src / "a.wav", "-o", tmp_path / "p2", "--segments", tmp_path / "a.npz")
    assert result.exit_code == 2 and "not a JSON or text file (it is not UTF-8 text)" in result.stderr
    assert "codec" not in result.stderr and not (tmp_path / "p2").exists()


def test_bench_without_cuda_says_so() -> None:
    if torch.cuda.is_available():
        pytest.skip("this checks the message on a machine without CUDA")
    for args in (["bench", "core", "--quick"], ["bench", "spectral", "--match", "istft"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code != 0
        assert "needs a CUDA device" in str(result.exception) + result.output


# --------------------------------------------------------------------------------------------
# mel


def test_mel_batched_equals_torchaudio_per_file(tmp_path: Path) -> None:
    import torchaudio

    src = make_folder(tmp_path)
    result = invoke("mel", src, "-o", tmp_path / "out", "--batch-size", "8", "-j", "0", "--device", "cpu")
    assert result.exit_code == 1  # the bad files
    rows = manifest(tmp_path / "out/manifest.jsonl")
    assert {n for n, r in rows.items() if r["status"] == "ok"} == GOOD
    ref_mel = torchaudio.transforms.MelSpectrogram(RATE, n_fft=400, hop_length=160, n_mels=80).double()
    for name, rel in (("a.wav", "a.npy"), ("c.wav", "c.npy"), ("b.flac", "sub/b.npy"), ("d.npy", "d.npy")):
        x = nio.read_signal(next(src.rglob(name)), default_rate=RATE)
        got = np.load(tmp_path / "out" / rel)
        ref = ref_mel(torch.from_numpy(x.data).double())
        assert got.dtype == np.float32 and got.shape == tuple(ref.shape)
        assert_close(torch.from_numpy(got).double(), ref, dtype="float32")


def test_mel_log_with_resampling(tmp_path: Path) -> None:
    import torchaudio

    src = make_folder(tmp_path)
    args = ["--log", "--sample-rate", "8000", "--n-fft", "256", "--hop-length", "64", "--n-mels", "40"]
    result = invoke("mel", src / "a.wav", "-o", tmp_path / "a.npy", *args)
    assert result.exit_code == 0, result.output
    x = torch.from_numpy(nio.read_audio(src / "a.wav").data).double()
    x8 = torchaudio.functional.resample(x, RATE, 8000)
    ref_mel = torchaudio.transforms.MelSpectrogram(8000, n_fft=256, hop_length=64, n_mels=40).double()
    ref = torch.log10(ref_mel(x8).clamp_min(1e-10))
    got = torch.from_numpy(np.load(tmp_path / "a.npy")).double()
    assert got.shape == ref.shape
    assert (got - ref).abs().max() < 1e-3  # log10 of float32 power


def test_mel_refuses_a_band_above_the_nyquist_frequency(tmp_path: Path) -> None:
    # At a file's own rate, --f-min at its Nyquist frequency wrote all-zero features with a warning
    # (above it the library's "f_min must be <= f_max" failed the file), and so did any --f-min above
    # it with an --f-max past Nyquist.
    src = tmp_path / "r"
    src.mkdir()
    noise = 0.1 * np.random.default_rng(3).standard_normal(8000).astype(np.float32)
    sf.write(src / "lo.wav", noise, 8000)
    sf.write(src / "hi.wav", noise, RATE)
    for band in (["--f-min", "4000"], ["--f-min", "5000", "--f-max", "7000"]):
        out = tmp_path / f"out{len(band)}"
        result = invoke("mel", src, "-o", out, "-j", "0", *band)
        assert result.exit_code == 1 and "1 ok, 1 failed" in result.stderr, result.output
        assert (
            f"{src / 'lo.wav'}: --f-min {band[1]} Hz is not below the Nyquist frequency of 8000 Hz audio "
            "(4000 Hz): no frequency bin lies in the band" in result.stderr
        )
        assert not (out / "lo.npy").exists() and np.abs(np.load(out / "hi.npy")).max() > 0
    # Where --sample-rate fixes the rate, a usage error before any file, whatever --f-max says.
    result = invoke("mel", src, "--sample-rate", "8000", "--f-min", "5000", "--f-max", "7000")
    assert result.exit_code == 2 and "below the Nyquist frequency of 8000 Hz audio (4000 Hz)" in result.stderr
    assert sorted(p.name for p in src.iterdir()) == ["hi.wav", "lo.wav"]


def test_mel_fails_a_file_whose_features_are_not_finite(tmp_path: Path) -> None:
    # A float WAV may hold samples far past ±1: their power overflowed float32 and the features were
    # written as NaN with exit 0 (vad, on the same path, found no speech). At 1 Hz the band 0..0 Hz gave
    # NaN features too.
    src = tmp_path / "r"
    src.mkdir()
    noise = 0.1 * np.random.default_rng(3).standard_normal(4000).astype(np.float32)
    sf.write(src / "loud.wav", noise * 1e25, RATE, subtype="FLOAT")
    sf.write(src / "ok.wav", noise, RATE, subtype="FLOAT")
    sf.write(src / "one_hz.wav", noise[:1000], 1, subtype="FLOAT")
    for args in ([], ["--whisper"]):
        out = tmp_path / f"out{len(args)}"
        result = invoke("mel", src, "-o", out, "-j", "0", *args)
        assert result.exit_code == 1, result.output
        assert f"{src / 'loud.wav'}: the mel features are not finite (their power overflows float32)" in (
            result.stderr
        )
        assert not (out / "loud.npy").exists() and np.isfinite(np.load(out / "ok.npy")).all()
    assert f"{src / 'one_hz.wav'}: no band lies below the Nyquist frequency of 1 Hz audio (0 Hz)" in (
        invoke("mel", src / "one_hz.wav", "-o", tmp_path / "h.npy").stderr
    )
    assert not (tmp_path / "h.npy").exists()


def test_mel_whisper_equals_per_file(tmp_path: Path) -> None:
    import nbxsig.features as nfe

    src = make_folder(tmp_path)
    result = invoke("mel", src, "--glob", "*.wav", "-o", tmp_path / "out", "--whisper", "-j", "0")
    assert result.exit_code == 1  # corrupt.wav, zero.wav
    for name in ("a", "c"):
        x = torch.from_numpy(nio.read_audio(src / f"{name}.wav").data).double()
        ref = nfe.whisper_log_mel(x, backend="torch")
        got = torch.from_numpy(np.load(tmp_path / f"out/{name}.npy")).double()
        assert got.shape == ref.shape == (x.shape[0], 80, x.shape[-1] // 160)
        assert_close(got, ref, dtype="float32")


@pytest.mark.parametrize("command", ["stft", "mel", "istft"])
def test_triton_backend_through_the_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    """The batched calls the CLI makes (center=False on a padded stack) on the Triton kernels
    (Triton's interpreter on CPU here, the GPU path on CUDA) equal torch's per-file results."""
    import torchaudio

    rng = np.random.default_rng(5)
    for name, n in (("a", 700), ("b", 731)):
        nio.write_audio(tmp_path / f"in/{name}.wav", 0.3 * rng.standard_normal((1, n)), RATE, subtype="FLOAT")
    monkeypatch.setenv("NBXSIG_BACKEND", "triton")
    if command == "stft":
        result = invoke("stft", tmp_path / "in", "-o", tmp_path / "out", "--n-fft", "32", "-j", "0")
    elif command == "mel":
        args = ["--n-fft", "64", "--hop-length", "16", "--n-mels", "8"]
        result = invoke("mel", tmp_path / "in", "-o", tmp_path / "out", *args, "-j", "0")
    else:
        spec = torch.randn(2, 17, 30, dtype=torch.complex64, generator=torch.Generator().manual_seed(3))
        np.save(tmp_path / "s.npy", spec.numpy())
        result = invoke("istft", tmp_path / "s.npy", "-o", tmp_path / "w.npy", "--n-fft", "32")
    assert result.exit_code == 0, result.output
    import sys

    assert f"nbxsig.kernels.{'mel' if command == 'mel' else 'stft'}" in sys.modules  # Triton ran
    if command == "istft":
        ref = torch.istft(spec.to(torch.complex128), 32, 8, window=hann(32))
        assert_close(torch.from_numpy(np.load(tmp_path / "w.npy")).double(), ref, dtype="float32")
        return
    for name in ("a", "b"):
        x = torch.from_numpy(nio.read_audio(tmp_path / f"in/{name}.wav").data).double()
        if command == "stft":
            got = np.load(tmp_path / f"out/{name}.npz")["spec"]
            ref = torch.stft(x, 32, 8, window=hann(32), return_complex=True)
            assert_close(torch.from_numpy(got).to(torch.complex128), ref, dtype="float32")
        else:
            got = np.load(tmp_path / f"out/{name}.npy")
            mel = torchaudio.transforms.MelSpectrogram(RATE, n_fft=64, hop_length=16, n_mels=8).double()
            assert_close(torch.from_numpy(got).double(), mel(x), dtype="float32")


@pytest.mark.parametrize(("n_fft", "hop"), [(400, 160), (512, 128), (256, 100), (64, 17)])
def test_mel_batch_width_aligns_frames_and_samples(n_fft: int, hop: int) -> None:
    # One compiled Triton kernel for every batch: width and frame count multiples of 16.
    from nbxsig.cli.features import MelParams, _aligned_width

    p = MelParams(None, n_fft, hop, 80, 0.0, None, False, False)
    for width in (n_fft, n_fft + 1, 16_400, 160_400, 160_401, 99_999):
        aligned = _aligned_width(width, p)
        frames = 1 + (aligned - n_fft) // hop
        assert aligned >= width and aligned % 16 == 0 and frames % 16 == 0
        assert aligned - width < 16 * hop + 16  # at most 16 frames of padding


def _unstamped(path: Path) -> bytes:
    """A file's bytes, less the time stamp libsndfile writes into a float WAV's PEAK chunk (chunk id,
    size, version, then 4 bytes of time): the one part of two writes of the same data that differs."""
    data = bytearray(path.read_bytes())
    at = data.find(b"PEAK") if data[:4] == b"RIFF" else -1
    if at >= 0:
        data[at + 12 : at + 16] = b"\0\0\0\0"
    return bytes(data)


@pytest.mark.parametrize(
    "args",
    [["mel"], ["filter", "--lowpass", "2000"], ["resample", "--rate", "8000"], ["stft", "--n-fft", "64"]],
    ids=["mel", "filter", "resample", "stft"],
)
def test_outputs_written_by_decode_workers_equal_main_process_writes(tmp_path: Path, args: list[str]) -> None:
    src = make_folder(tmp_path)
    # -j 2: the decode workers write the results; -j 0: the main process's writer threads. One file
    # per batch: which files share a batch depends on the order decodes end, and a batch's padded
    # width may change a result's last bits (the outputs must differ only by who wrote them).
    by_workers = invoke(*args, src, "-o", tmp_path / "w", "-j", "2", "--batch-size", "1", "-v")
    by_threads = invoke(*args, src, "-o", tmp_path / "t", "-j", "0", "--batch-size", "1", "-v")
    assert by_workers.exit_code == by_threads.exit_code == 1  # the bad files
    assert "workers: 0 files" not in by_workers.stderr and "workers: 0 files" in by_threads.stderr
    written = sorted(p.relative_to(tmp_path / "t") for p in (tmp_path / "t").rglob("*") if p.is_file())
    assert written == sorted(
        p.relative_to(tmp_path / "w") for p in (tmp_path / "w").rglob("*") if p.is_file()
    )
    for rel in written:
        if rel.suffix == ".npz":  # zip members carry the time of writing: compare the arrays
            a, b = np.load(tmp_path / "w" / rel), np.load(tmp_path / "t" / rel)
            assert a.files == b.files and all(np.array_equal(a[k], b[k]) for k in a.files)
        elif rel.name != "manifest.jsonl":
            assert _unstamped(tmp_path / "w" / rel) == _unstamped(tmp_path / "t" / rel), rel
    if args[0] == "stft":  # and istft's wav outputs, from those .npz
        for where, jobs in (("iw", "2"), ("it", "0")):
            result = invoke(
                "istft",
                tmp_path / "w",
                "--glob",
                "*.npz",
                "-o",
                tmp_path / where,
                "-j",
                jobs,
                "--batch-size",
                "1",
            )
            assert result.exit_code == 0, result.output
        wavs = sorted((tmp_path / "iw").rglob("*.wav"))
        assert len(wavs) == len(GOOD)
        for p in wavs:
            assert _unstamped(p) == _unstamped(tmp_path / "it" / p.relative_to(tmp_path / "iw"))


# --------------------------------------------------------------------------------------------
# Warnings are the CLI's own lines; defaults and refusals come from the library


def _warning_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("nbxsig: warning: ")]


@pytest.mark.parametrize("command", ["mel", "vad"])
def test_empty_mel_filters_are_a_cli_warning_naming_a_file(tmp_path: Path, command: str) -> None:
    """n_fft 64 at 16 kHz has 33 bins, too few for 40 mels: nbxsig.features warns (as torchaudio does)
    that 7 filters are empty. The user gets one line naming a file and the options, not the library's
    raw UserWarning, in every run (the library caches its filters and warns only when it builds them)."""
    rng = np.random.default_rng(9)
    for name in ("a", "b"):
        nio.write_audio(
            tmp_path / f"in/{name}.wav", 0.1 * rng.standard_normal((1, 900)), RATE, subtype="FLOAT"
        )
    if command == "mel":
        args, hint = (
            ["--n-fft", "64", "--hop-length", "16", "--n-mels", "40"],
            "lower --n-mels or raise --n-fft",
        )
    else:
        args, hint = (
            ["--frame-ms", "4", "--hop-ms", "1", "--n-mels", "40"],
            "lower --n-mels or raise --frame-ms",
        )
    for _ in range(2):
        with warnings.catch_warnings(record=True) as escaped:
            result = invoke(command, tmp_path / "in", "-o", tmp_path / "out", *args, "-j", "0", "--overwrite")
        assert result.exit_code == 0, result.output
        assert [str(w.message) for w in escaped] == []
        assert _warning_lines(result.stderr) == [
            f"nbxsig: warning: {tmp_path / 'in/a.wav'}: 7 of the 40 mel filters are empty (all zero) at "
            "16000 Hz: 33 frequency bins (n_fft 64) are too few for 40 mels between 0 and 8000 Hz, and "
            f"those mels' rows of the output are 0; {hint} (said once for all files at 16000 Hz)"
        ]
    if command == "mel":  # what the line says
        mel = np.load(tmp_path / "out/b.npy")
        assert mel.shape[:2] == (1, 40) and int((mel[0].max(axis=1) == 0).sum()) == 7


def test_the_manifest_keeps_each_file_s_warnings(tmp_path: Path) -> None:
    """mel's defaults (n_fft 400, 80 mels) leave 5 filters empty at 48 kHz and none at 16 kHz: the rows
    of both 48 kHz files carry the warning stderr says once naming the first, the 16 kHz file's none."""
    rng = np.random.default_rng(11)
    for name, rate in (("a", 48000), ("b", RATE), ("c", 48000)):
        nio.write_audio(
            tmp_path / f"in/{name}.wav", 0.1 * rng.standard_normal((1, rate // 10)), rate, subtype="FLOAT"
        )
    with warnings.catch_warnings(record=True) as escaped:
        result = invoke("mel", tmp_path / "in", "-o", tmp_path / "out", "-j", "0")
    assert result.exit_code == 0, result.output
    assert [str(w.message) for w in escaped] == []
    rows = manifest(tmp_path / "out/manifest.jsonl")
    said = (
        "5 of the 80 mel filters are empty (all zero) at 48000 Hz: 201 frequency bins (n_fft 400) are too "
        "few for 80 mels between 0 and 24000 Hz, and those mels' rows of the output are 0; lower --n-mels "
        "or raise --n-fft (said once for all files at 48000 Hz)"
    )
    assert _warning_lines(result.stderr) == [f"nbxsig: warning: {tmp_path / 'in/a.wav'}: {said}"]
    assert {name: row["warnings"] for name, row in rows.items()} == {
        "a.wav": [said],
        "b.wav": [],
        "c.wav": [said],
    }
    for name, empty in (("a", 5), ("b", 0), ("c", 5)):  # what the rows say
        mel = np.load(tmp_path / f"out/{name}.npy")
        assert int((mel[0].max(axis=1) == 0).sum()) == empty


def test_a_library_warning_during_a_batch_names_its_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import nbxsig.stft

    real = nbxsig.stft.stft

    def noisy(*args: object, **kwargs: object) -> torch.Tensor:
        warnings.warn("something odd about this input", UserWarning, stacklevel=2)
        return real(*args, **kwargs)

    monkeypatch.setattr(nbxsig.stft, "stft", noisy)
    for name in ("a", "b", "c"):
        nio.write_audio(tmp_path / f"in/{name}.wav", np.zeros((1, 500)), RATE, subtype="FLOAT")
    with warnings.catch_warnings(record=True) as escaped:
        result = invoke("stft", tmp_path / "in", "-o", tmp_path / "out", "--n-fft", "64", "-j", "0")
    assert result.exit_code == 0, result.output
    assert [str(w.message) for w in escaped] == []
    src = tmp_path / "in"
    assert _warning_lines(result.stderr) == [
        f"nbxsig: warning: {src / 'a.wav'}, {src / 'b.wav'} and 1 more: something odd about this input"
    ]
    # One batch: the warning cannot tell which file it is about, so it is in each file's row.
    rows = manifest(tmp_path / "out/manifest.jsonl")
    assert {name: row["warnings"] for name, row in rows.items()} == {
        name: ["something odd about this input"] for name in ("a.wav", "b.wav", "c.wav")
    }


def test_image_warnings_and_refusals_are_per_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PIL warns above MAX_IMAGE_PIXELS and refuses above twice that (decompression bombs): the
    warning is the CLI's line naming the file (and in info's --json object), the refusal a failed
    file, never a raw warning or a traceback; so is a PNG whose text chunk PIL refuses (a ValueError)."""
    from PIL import Image, PngImagePlugin

    src = tmp_path / "in"
    nio.write_image(src / "big.png", np.zeros((1, 16, 16)))  # 256 pixels
    nio.write_image(src / "huge.png", np.zeros((1, 30, 30)))  # 900 pixels
    nio.write_image(src / "small.png", np.zeros((1, 8, 8)))
    text = PngImagePlugin.PngInfo()
    text.add_text("comment", "x" * (PngImagePlugin.MAX_TEXT_CHUNK + 1), zip=True)
    Image.new("L", (4, 4)).save(src / "text.png", pnginfo=text)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 200)
    with warnings.catch_warnings(record=True) as escaped:
        filtered = invoke("filter", src, "-o", tmp_path / "out", "--box", "3", "-j", "0")
        described = invoke("info", src, "--json")
    assert [str(w.message) for w in escaped] == []
    warned = f"nbxsig: warning: {src / 'big.png'}: Image size (256 pixels) exceeds limit of 200 pixels"
    refused = f"nbxsig: failed: {src / 'huge.png'}: cannot decode as an image (Image size (900 pixels)"
    for result in (filtered, described):
        assert result.exit_code == 1
        assert [line[: len(warned)] for line in _warning_lines(result.stderr)] == [warned]
        assert refused in result.stderr and "Traceback" not in result.output
        assert f"nbxsig: failed: {src / 'text.png'}: cannot decode as an image (Decompressed" in result.stderr
    rows = manifest(tmp_path / "out/manifest.jsonl")
    statuses = {n: r["status"] for n, r in rows.items()}
    assert statuses == {"big.png": "ok", "huge.png": "failed", "small.png": "ok", "text.png": "failed"}
    [pil_says] = rows["big.png"]["warnings"]
    assert pil_says.startswith("Image size (256 pixels) exceeds limit of 200")
    assert [rows[name]["warnings"] for name in ("huge.png", "small.png", "text.png")] == [[], [], []]
    objects = {Path(row["path"]).name: row for row in map(json.loads, described.stdout.splitlines())}
    assert objects["big.png"]["warnings"][0].startswith("Image size (256 pixels) exceeds limit of 200")
    assert "warnings" not in objects["small.png"] and "error" in objects["huge.png"]


def test_plot_checks_npz_parameters_and_does_not_overflow(tmp_path: Path) -> None:
    spec = np.ones((3, 4), np.complex64)
    np.savez(tmp_path / "zero.npz", spec=spec, sample_rate=np.int64(0))
    np.savez(tmp_path / "neg.npz", spec=spec, sample_rate=np.int64(RATE), hop_length=np.int64(-3))
    np.save(tmp_path / "loud.npy", np.full((11, 20), 1e30, np.complex64))  # |X|² beyond float32
    np.savez(tmp_path / "text.npz", spec=np.array([["a", "b"], ["c", "d"]]))
    with warnings.catch_warnings(record=True) as escaped:
        result = invoke(
            "plot",
            tmp_path / "zero.npz",
            tmp_path / "neg.npz",
            tmp_path / "loud.npy",
            tmp_path / "text.npz",
            "-o",
            tmp_path / "p",
            "-j",
            "0",
        )
    assert [str(w.message) for w in escaped] == [] and _warning_lines(result.stderr) == []
    assert result.exit_code == 1
    assert (
        f"{tmp_path / 'zero.npz'}: the .npz's sample_rate must be a positive integer, got 0" in result.stderr
    )
    assert (
        f"{tmp_path / 'neg.npz'}: the .npz's hop_length must be a positive integer, got -3" in result.stderr
    )
    assert (
        f"{tmp_path / 'text.npz'}: expected numbers (complex, float or integer), got dtype <U1"
        in result.stderr
    )
    assert "division by zero" not in result.stderr and "ufunc" not in result.stderr
    assert sorted(p.name for p in (tmp_path / "p").glob("*.png")) == ["loud.png"]


def test_stft_and_istft_take_the_default_hop_from_the_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI asks nbxsig for torch's default hop instead of restating n_fft // 4: a library that
    answered otherwise would be followed (here: n_fft // 2)."""
    import nbxsig.streaming

    monkeypatch.setattr(nbxsig.streaming, "default_hop_length", lambda n_fft: n_fft // 2)
    np.save(tmp_path / "x.npy", np.random.default_rng(1).standard_normal((1, 640)).astype(np.float32))
    assert invoke("stft", tmp_path / "x.npy", "--n-fft", "64", "-q").exit_code == 0
    assert int(np.load(tmp_path / "x.npz")["hop_length"]) == 32
    spec = torch.randn(1, 33, 12, dtype=torch.complex64, generator=torch.Generator().manual_seed(2))
    np.save(tmp_path / "s.npy", spec.numpy())
    result = invoke("istft", tmp_path / "s.npy", "-o", tmp_path / "w.npy", "--n-fft", "64", "-q")
    assert result.exit_code == 0, result.output
    ref = torch.istft(spec.to(torch.complex128), 64, 32, window=hann(64))
    assert_close(torch.from_numpy(np.load(tmp_path / "w.npy")).double(), ref, dtype="float32")


@pytest.mark.parametrize(
    ("pad_mode", "samples", "refused"),
    [("circular", 31, True), ("circular", 32, False), ("reflect", 32, True), ("reflect", 33, False)],
)
def test_stft_refuses_the_signals_torch_refuses(
    tmp_path: Path, pad_mode: str, samples: int, refused: bool
) -> None:
    """Centre padding by n_fft // 2 = 32: torch.stft refuses a circular pad that wraps more than once
    and a reflect pad as long as the signal; the batch's own padding must not wrap or fail in its words."""
    x = np.random.default_rng(3).standard_normal((1, samples)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    result = invoke("stft", tmp_path / "x.npy", "--n-fft", "64", "--pad-mode", pad_mode)
    ref = None
    with contextlib.suppress(RuntimeError):
        ref = torch.stft(
            torch.from_numpy(x).double(), 64, 16, window=hann(64), pad_mode=pad_mode, return_complex=True
        )
    assert (ref is None) == refused
    if refused:
        assert result.exit_code == 1 and not (tmp_path / "x.npz").exists()
        assert f"{samples} samples are too few for n_fft 64 with --pad-mode {pad_mode}" in result.stderr
    else:
        assert result.exit_code == 0, result.output
        assert_close(
            torch.from_numpy(np.load(tmp_path / "x.npz")["spec"]).to(torch.complex128), ref, dtype="float32"
        )


def test_info_json_is_json_whatever_an_npz_holds(tmp_path: Path) -> None:
    """Another tool's .npz may hold a complex, bytes, a date or NaN under a parameter's key: --json
    still prints one valid JSON object per file (no NaN, which JSON has no word for), not a traceback."""
    spec = np.ones((3, 4), np.complex64)
    odd = {
        "sample_rate": np.complex64(1 + 2j),
        "n_fft": np.bytes_(b"ab"),
        "hop_length": np.datetime64("2020-01-01"),
    }
    np.savez(tmp_path / "odd.npz", spec=spec, **odd)
    np.savez(tmp_path / "nan.npz", spec=spec, sample_rate=np.float64("nan"), n_fft=np.int64(6))

    def strict(text: str) -> object:
        raise ValueError(f"not JSON: {text}")

    result = invoke("info", "--json", tmp_path / "odd.npz", tmp_path / "nan.npz")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line, parse_constant=strict) for line in result.stdout.splitlines()]
    assert [(r["sample_rate"], r.get("n_fft"), r.get("hop_length")) for r in rows] == [
        ("nan", 6, None),  # files in sorted order
        ("(1+2j)", "b'ab'", "2020-01-01"),
    ]
