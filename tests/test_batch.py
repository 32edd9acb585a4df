"""nbxsig.batch: discovery, sharding, output planning and the run loop, with a toy job."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io as stdio
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from nbxsig import batch
from nbxsig import io as nio


def _touch(root: Path, *names: str) -> None:
    for name in names:
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x")


# --------------------------------------------------------------------------------------------
# discovery


def test_discover_folders_recursively_filtered_and_sorted(tmp_path: Path) -> None:
    _touch(
        tmp_path,
        "in/b.wav",
        "in/a/c.FLAC",
        "in/notes.txt",
        "in/.hidden.wav",
        "in/.git/x.wav",
        "in/a/.d.wav.tmp-1-2",
    )
    found = batch.discover([tmp_path / "in"], extensions=[".wav", ".flac"])
    assert [f.rel.as_posix() for f in found] == ["a/c.FLAC", "b.wav"]
    assert all(f.from_folder for f in found)


def test_discover_glob(tmp_path: Path) -> None:
    _touch(tmp_path, "in/x/a.wav", "in/y/b.wav", "in/y/c.flac")
    found = batch.discover([tmp_path / "in"], extensions=[".wav"], glob="y/*")
    assert [f.rel.as_posix() for f in found] == ["y/b.wav", "y/c.flac"]
    found = batch.discover([tmp_path / "in"], extensions=[".wav"], glob="*.flac")  # names at any depth
    assert [f.rel.as_posix() for f in found] == ["y/c.flac"]


def test_discover_named_files_mirror_their_common_folder(tmp_path: Path) -> None:
    _touch(tmp_path, "d/one/a.wav", "d/two/b.txt")
    found = batch.discover([tmp_path / "d/one/a.wav", tmp_path / "d/two/b.txt"], extensions=[".wav"])
    # A file named directly is taken whatever its extension (it is then reported, not ignored).
    assert [f.rel.as_posix() for f in found] == ["one/a.wav", "two/b.txt"]
    assert not any(f.from_folder for f in found)


def test_discover_list_files_relative_to_the_list(tmp_path: Path) -> None:
    _touch(tmp_path, "data/a.wav", "data/sub/b.wav", "other/c.wav")
    (tmp_path / "data/list.txt").write_text(
        "# comment\na.wav\n\nsub\n" + str(tmp_path / "other/c.wav") + "\n"
    )
    found = batch.discover([f"@{tmp_path / 'data/list.txt'}"], extensions=[".wav"])
    assert sorted(p.path.name for p in found) == ["a.wav", "b.wav", "c.wav"]


def test_discover_list_files_written_with_a_byte_order_mark(tmp_path: Path) -> None:
    _touch(tmp_path, "a.wav", "b.wav")
    (tmp_path / "list.txt").write_bytes(b"\xef\xbb\xbfa.wav\r\nb.wav\r\n")  # Windows tools write both
    found = batch.discover([f"@{tmp_path / 'list.txt'}"], extensions=[".wav"])
    assert [f.path for f in found] == [tmp_path / "a.wav", tmp_path / "b.wav"]


def test_discover_deduplicates(tmp_path: Path) -> None:
    _touch(tmp_path, "in/a.wav")
    found = batch.discover([tmp_path / "in", tmp_path / "in/a.wav"], extensions=[".wav"])
    assert len(found) == 1


def test_discover_errors(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(batch.BatchUsageError, match="no input files"):
        batch.discover([tmp_path / "empty"], extensions=[".wav"])
    with pytest.raises(batch.BatchUsageError, match="cannot read the input list"):
        batch.discover([f"@{tmp_path / 'nope.txt'}"], extensions=[".wav"])


@pytest.mark.parametrize("pattern", ["/tmp/*", ""], ids=["absolute", "empty"])
def test_discover_refuses_a_glob_it_cannot_search(tmp_path: Path, pattern: str) -> None:
    _touch(tmp_path, "in/a.wav")
    with pytest.raises(batch.BatchUsageError, match="--glob must be a pattern relative"):
        batch.discover([tmp_path / "in"], extensions=[".wav"], glob=pattern)


def test_discover_glob_double_star_means_every_file_below(tmp_path: Path) -> None:
    _touch(tmp_path, "in/a.wav", "in/x/b.txt", "in/x/y/c.flac")
    found = batch.discover([tmp_path / "in"], extensions=[".wav"], glob="**")
    assert [f.rel.as_posix() for f in found] == ["a.wav", "x/b.txt", "x/y/c.flac"]
    found = batch.discover([tmp_path / "in"], extensions=[".wav"], glob="x/**")
    assert [f.rel.as_posix() for f in found] == ["x/b.txt", "x/y/c.flac"]


def test_discover_excludes_only_a_folder_strictly_inside_the_searched_one(tmp_path: Path) -> None:
    _touch(tmp_path, "in/a.wav", "in/out/a.wav")

    def rels(exclude: Path | str) -> list[str]:
        found = batch.discover([tmp_path / "in"], extensions=[".wav"], exclude=exclude)
        return [f.rel.as_posix() for f in found]

    assert rels(tmp_path / "in/out") == ["a.wav"]
    # The searched folder itself, or one above it, is where outputs go: nothing is left out.
    assert rels(tmp_path / "in") == rels(f"{tmp_path / 'in'}/") == rels(tmp_path) == ["a.wav", "out/a.wav"]
    _touch(tmp_path, "only/out/a.wav")  # every file is under the output folder: nothing to do
    with pytest.raises(batch.BatchUsageError, match="no input files"):
        batch.discover([tmp_path / "only"], extensions=[".wav"], exclude=f"{tmp_path / 'only/out'}/")
    # ... and inside one searched folder, not the other.
    _touch(tmp_path, "in/out/deeper/b.wav")
    found = batch.discover(
        [tmp_path / "in", tmp_path / "in/out"], extensions=[".wav"], exclude=tmp_path / "in/out"
    )
    assert sorted(f.path.relative_to(tmp_path).as_posix() for f in found) == [
        "in/a.wav",
        "in/out/a.wav",
        "in/out/deeper/b.wav",
    ]


def test_discover_keeps_links_by_their_names_and_finds_broken_ones(tmp_path: Path) -> None:
    _touch(tmp_path, "in/a.wav")
    (tmp_path / "in/b.wav").symlink_to("a.wav")
    (tmp_path / "in/gone.wav").symlink_to("nowhere.wav")
    found = batch.discover([tmp_path / "in", tmp_path / "in/a.wav"], extensions=[".wav"])
    assert [f.rel.as_posix() for f in found] == ["a.wav", "b.wav", "gone.wav"]
    with pytest.raises(
        nio.InputFileError, match=r"gone.wav: no such file \(a broken symbolic link to nowhere"
    ):
        nio.read_signal(tmp_path / "in/gone.wav", default_rate=1)


# --------------------------------------------------------------------------------------------
# sharding


@pytest.mark.parametrize("spec", ["0/3", "4/3", "1", "a/b", "1/0", "-1/2"])
def test_parse_shard_refuses(spec: str) -> None:
    with pytest.raises(batch.BatchUsageError, match="--shard"):
        batch.parse_shard(spec)


def test_shards_partition_the_inputs(tmp_path: Path) -> None:
    names = [f"f{i:03d}.wav" for i in range(60)]
    _touch(tmp_path, *(f"in/{n}" for n in names))
    found = batch.discover([tmp_path / "in"], extensions=[".wav"])
    parts = [batch.shard(found, batch.parse_shard(f"{k}/4")) for k in range(1, 5)]
    flat = [f.rel.as_posix() for part in parts for f in part]
    assert sorted(flat) == names  # each file exactly once
    assert all(len(p) >= 5 for p in parts)  # no shard starved
    # Deterministic and independent of the listing's order.
    again = batch.shard(list(reversed(found)), (2, 4))
    assert sorted(f.rel for f in again) == sorted(f.rel for f in parts[1])


# --------------------------------------------------------------------------------------------
# planning


def test_plan_folder_output_mirrors_the_tree(tmp_path: Path) -> None:
    _touch(tmp_path, "in/a.wav", "in/s/b.flac")
    found = batch.discover([tmp_path / "in"], extensions=[".wav", ".flac"])
    tasks, out_dir = batch.plan(found, output=tmp_path / "out", suffix=lambda p: ".npy", single_input=False)
    assert out_dir == tmp_path / "out"
    assert [t.output for t in tasks] == [tmp_path / "out/a.npy", tmp_path / "out/s/b.npy"]
    assert all(t.error is None for t in tasks)


def test_plan_single_file_output_and_beside(tmp_path: Path) -> None:
    _touch(tmp_path, "a.wav")
    found = batch.discover([tmp_path / "a.wav"], extensions=[".wav"])
    tasks, out_dir = batch.plan(found, output=tmp_path / "x.npy", suffix=lambda p: ".npz", single_input=True)
    assert out_dir is None and tasks[0].output == tmp_path / "x.npy"
    tasks, _ = batch.plan(found, output=f"{tmp_path / 'dir'}/", suffix=lambda p: ".npz", single_input=True)
    assert tasks[0].output == tmp_path / "dir/a.npz"
    tasks, _ = batch.plan(found, output=None, suffix=lambda p: ".npz", single_input=True)
    assert tasks[0].output == tmp_path / "a.npz"


def test_plan_never_targets_an_input(tmp_path: Path) -> None:
    _touch(tmp_path, "in/a.wav", "in/a.flac", "in/b.wav")
    found = batch.discover([tmp_path / "in"], extensions=[".wav", ".flac"])
    # Same extension, no -o: the output would be the input itself.
    tasks, _ = batch.plan(found, output=None, suffix=lambda p: p.suffix, single_input=False)
    assert all("refusing to overwrite the input" in t.error for t in tasks)
    # a.flac → a.wav would overwrite the input a.wav; and two inputs cannot share an output.
    tasks, _ = batch.plan(found, output=None, suffix=lambda p: ".wav", single_input=False)
    assert "refusing to overwrite" in tasks[0].error  # a.flac → a.wav (an input)
    tasks, _ = batch.plan(found, output=tmp_path / "o", suffix=lambda p: ".npy", single_input=False)
    assert tasks[0].error is None and "also the output of" in tasks[1].error


def test_arrays_beside_their_audio_are_set_aside_and_never_replaced(tmp_path: Path) -> None:
    # a.npy beside a.wav: an output of a.wav (mel, stft), not a waveform to process; b.npy has no audio.
    _touch(tmp_path, "in/a.wav", "in/a.npy", "in/b.npy", "in/s/a.npz")
    found = batch.discover([tmp_path / "in"], extensions=[".wav", ".npy", ".npz"])
    taken, aside = batch.set_aside_outputs(found)
    assert [f.rel.as_posix() for f in taken] == ["a.wav", "b.npy", "s/a.npz"]
    assert [f.rel.as_posix() for f in aside] == ["a.npy"]
    tasks, _ = batch.plan(taken, output=None, suffix=lambda p: ".npy", single_input=False, aside=aside)
    assert [(t.output.name, t.output_found, t.error) for t in tasks[:1]] == [("a.npy", True, None)]
    # Resumed: skipped as any existing output; with overwrite, refused rather than replaced.
    assert batch.run(tasks[:1], ToyJob().job(), jobs=0).skipped == 1
    summary = batch.run(tasks[:1], ToyJob().job(), jobs=0, overwrite=True, stream=stdio.StringIO())
    assert summary.failed == 1 and (tmp_path / "in/a.npy").read_bytes() == b"x"
    # Named directly, an array is an input like any other.
    named = batch.discover([tmp_path / "in/a.wav", tmp_path / "in/a.npy"], extensions=[".wav"])
    assert batch.set_aside_outputs(named) == (named, [])


def test_plan_gives_a_shared_output_to_the_audio_file(tmp_path: Path) -> None:
    _touch(tmp_path, "in/a.npy", "in/a.wav")
    found = batch.discover([tmp_path / "in/a.npy", tmp_path / "in/a.wav"], extensions=[".wav"])
    tasks, _ = batch.plan(found, output=None, suffix=lambda p: ".npz", single_input=False)
    assert [t.input.name for t in tasks] == ["a.npy", "a.wav"]  # reported in the order found
    assert tasks[1].error is None and "also the output of" in tasks[0].error


def test_plan_protects_inputs_outside_the_shard(tmp_path: Path) -> None:
    _touch(tmp_path, "in/a.wav", "in/a.npy")
    found = batch.discover([tmp_path / "in/a.wav", tmp_path / "in/a.npy"], extensions=[".wav"])
    wav = [f for f in found if f.path.suffix == ".wav"]  # the shard that holds a.wav only
    tasks, _ = batch.plan(wav, output=None, suffix=lambda p: ".npy", single_input=False, protect=[])
    assert tasks[0].error is None  # what the shard alone cannot know
    tasks, _ = batch.plan(
        wav, output=None, suffix=lambda p: ".npy", single_input=False, protect=[f.path for f in found]
    )
    assert "refusing to overwrite the input" in tasks[0].error


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        ("in/a.wav", "would overwrite the input"),
        ("list.txt", "would overwrite the input"),
        ("taps.npy", "would overwrite the input"),
        ("out/a.npy", "also the output of"),
        ("in", "is a folder"),
    ],
    ids=["input", "list-file", "protected", "output", "folder"],
)
def test_check_manifest_refuses_what_the_user_gave(tmp_path: Path, manifest: str, message: str) -> None:
    _touch(tmp_path, "in/a.wav", "taps.npy")
    (tmp_path / "list.txt").write_text("in\n")
    inputs = [f"@{tmp_path / 'list.txt'}"]
    found = batch.discover(inputs, extensions=[".wav"])
    tasks, _ = batch.plan(found, output=tmp_path / "out", suffix=lambda p: ".npy", single_input=False)
    with pytest.raises(batch.BatchUsageError, match=message):
        batch.check_manifest(
            tmp_path / manifest, inputs=inputs, found=found, tasks=tasks, protect=[tmp_path / "taps.npy"]
        )
    batch.check_manifest(tmp_path / "m.jsonl", inputs=inputs, found=found, tasks=tasks)


# --------------------------------------------------------------------------------------------
# running


# nbxsig.io imports numpy only, so spawned decode workers start quickly.
_toy_load = functools.partial(nio.read_signal, default_rate=1000)


class ToyJob:
    """Doubles the signal; records the batches it saw; fails on a marked file."""

    def __init__(self, *, poison: float | None = None):
        self.batches: list[list[int]] = []
        self.poison = poison

    def process(self, items: list[nio.Audio]) -> list[np.ndarray]:
        self.batches.append([it.samples for it in items])
        if self.poison is not None and any(np.any(it.data == self.poison) for it in items):
            raise ValueError("poisoned input")
        stacked, rows = batch.pad_stack([torch.from_numpy(it.data) for it in items])
        out = (2 * stacked).numpy()
        res, r = [], 0
        for it, n in zip(items, rows, strict=True):
            res.append(out[r : r + n, : it.samples])
            r += n
        return res

    def job(self) -> batch.Job:
        return batch.Job(
            load=_toy_load,
            process=self.process,
            save=lambda item, result, out: nio.write_npy(out, result),
            group_key=lambda a: a.sample_rate,
            length=lambda a: a.samples,
        )


def _arrays(root: Path, lengths: list[int]) -> list[Path]:
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, n in enumerate(lengths):
        p = root / f"x{i:02d}.npy"
        np.save(p, np.arange(1, n + 1, dtype=np.float32)[None] / n)
        paths.append(p)
    return paths


def _tasks(tmp_path: Path, *, out: str = "out") -> list[batch.Task]:
    found = batch.discover([tmp_path / "in"], extensions=[".npy"])
    tasks, _ = batch.plan(found, output=tmp_path / out, suffix=lambda p: ".npy", single_input=False)
    return tasks


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_run_buckets_similar_lengths(tmp_path: Path) -> None:
    lengths = [100, 3000, 101, 3010, 102, 2990, 104, 50]
    _arrays(tmp_path / "in", lengths)
    toy = ToyJob()
    summary = batch.run(_tasks(tmp_path), toy.job(), batch_size=3, jobs=0, manifest=tmp_path / "m.jsonl")
    assert (summary.ok, summary.failed, summary.skipped) == (8, 0, 0)
    for b in toy.batches:
        assert max(b) <= 1.1 * min(b), f"batch mixes lengths {b}"
        assert len(b) <= 3
    assert sorted(n for b in toy.batches for n in b) == sorted(lengths)
    for i, n in enumerate(lengths):
        got = np.load(tmp_path / f"out/x{i:02d}.npy")
        np.testing.assert_array_equal(got, 2 * np.arange(1, n + 1, dtype=np.float32)[None] / n)
    rows = _rows(tmp_path / "m.jsonl")
    assert len(rows) == 8 and {r["status"] for r in rows} == {"ok"}
    assert {r["samples"] for r in rows} == set(lengths) and {r["sample_rate"] for r in rows} == {1000}
    assert all(r["warnings"] == [] for r in rows)  # nio.Audio carries none
    assert summary.line().startswith("8 ok, 0 failed, 0 skipped in ")


def test_run_one_bad_file_does_not_sink_its_batch(tmp_path: Path) -> None:
    paths = _arrays(tmp_path / "in", [100, 100, 100, 100])
    bad = np.full((1, 100), 7.0, np.float32)
    np.save(paths[2], bad)
    toy = ToyJob(poison=7.0)
    summary = batch.run(_tasks(tmp_path), toy.job(), batch_size=4, jobs=0, manifest=tmp_path / "m.jsonl")
    assert (summary.ok, summary.failed) == (3, 1)
    rows = {Path(r["input"]).name: r for r in _rows(tmp_path / "m.jsonl")}
    assert rows["x02.npy"]["status"] == "failed" and "poisoned input" in rows["x02.npy"]["error"]
    assert not (tmp_path / "out/x02.npy").exists() and (tmp_path / "out/x03.npy").exists()


def test_run_skips_existing_unless_overwrite(tmp_path: Path) -> None:
    _arrays(tmp_path / "in", [10, 20, 30])
    (tmp_path / "out").mkdir()
    np.save(tmp_path / "out/x01.npy", np.zeros(1))
    summary = batch.run(_tasks(tmp_path), ToyJob().job(), jobs=0)
    assert (summary.ok, summary.skipped) == (2, 1)
    assert np.load(tmp_path / "out/x01.npy").shape == (1,)
    summary = batch.run(_tasks(tmp_path), ToyJob().job(), jobs=0, overwrite=True)
    assert (summary.ok, summary.skipped) == (3, 0)
    assert np.load(tmp_path / "out/x01.npy").shape == (1, 20)


def test_run_with_decode_workers(tmp_path: Path) -> None:
    lengths = [64, 65, 66, 500, 501, 7]
    _arrays(tmp_path / "in", lengths)
    (tmp_path / "in/broken.npy").write_bytes(b"not an array")
    summary = batch.run(_tasks(tmp_path), ToyJob().job(), batch_size=2, jobs=2)
    assert (summary.ok, summary.failed) == (6, 1)
    assert summary.decode_seconds >= 0 and summary.batches >= 3
    for i, n in enumerate(lengths):
        assert np.load(tmp_path / f"out/x{i:02d}.npy").shape == (1, n)


def test_run_reports_unwritable_outputs(tmp_path: Path) -> None:
    _arrays(tmp_path / "in", [10, 20])
    (tmp_path / "blocker").write_text("a regular file where a folder should be")
    stream = stdio.StringIO()
    summary = batch.run(
        _tasks(tmp_path, out="blocker/out"),
        ToyJob().job(),
        jobs=0,
        manifest=tmp_path / "blocker/out/manifest.jsonl",
        stream=stream,
    )
    assert (summary.ok, summary.failed) == (0, 2)
    text = stream.getvalue()
    assert "cannot write the manifest" in text and text.count("nbxsig: failed:") == 2
    assert "blocker" in text


def test_run_says_in_its_summary_that_the_manifest_was_not_written(tmp_path: Path) -> None:
    _arrays(tmp_path / "in", [10, 20])
    (tmp_path / "blocker").write_text("a regular file where the manifest's folder should be")
    stream = stdio.StringIO()
    summary = batch.run(
        _tasks(tmp_path), ToyJob().job(), jobs=0, manifest=tmp_path / "blocker/m.jsonl", stream=stream
    )
    # Every file is written; the record of them is not, which the CLI's exit status must say.
    assert (summary.ok, summary.failed) == (2, 0)
    where = tmp_path / "blocker/m.jsonl"
    assert summary.manifest_error == f"cannot write the manifest {where}: Not a directory"
    assert f"nbxsig: {summary.manifest_error}" in stream.getvalue()
    written = batch.run(_tasks(tmp_path), ToyJob().job(), jobs=0, manifest=tmp_path / "m.jsonl")
    assert written.manifest_error is None and len(_rows(tmp_path / "m.jsonl")) == 2


def test_run_writes_the_manifest_atomically(tmp_path: Path) -> None:
    _arrays(tmp_path / "in", [10, 20])
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("the last run's rows\n")
    nio.write_npy(tmp_path / f".{manifest.name}.tmp-1-dead", np.zeros(1))  # a killed run's
    seen: list[str] = []

    def process(items: list[nio.Audio]) -> list[np.ndarray]:
        seen.append(manifest.read_text())
        return [it.data for it in items]

    job = batch.Job(
        load=_toy_load, process=process, save=lambda item, result, out: nio.write_npy(out, result)
    )
    summary = batch.run(_tasks(tmp_path), job, batch_size=1, jobs=0, manifest=manifest)
    assert summary.ok == 2
    assert seen == ["the last run's rows\n"] * 2  # whole until the run ends, then replaced
    assert [r["status"] for r in _rows(manifest)] == ["ok", "ok"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "m.jsonl", "out"]  # no temporary left


@dataclasses.dataclass
class _Noted(nio.Audio):
    """Decoded audio with what was said about its file (see :attr:`batch.Job.load`)."""

    warnings: list[str] = dataclasses.field(default_factory=list)


def _noted_load(path: Path) -> _Noted:
    """The toy's decoding, which has something to say about x00 and x03."""
    audio = _toy_load(path)
    noted = _Noted(audio.data, audio.sample_rate, audio.subtype, audio.rate_assumed)
    if path.name in ("x00.npy", "x03.npy"):
        noted.warnings.append(f"decoding {path.name} noticed something")
    return noted


def test_run_records_each_file_s_warnings_in_the_manifest(tmp_path: Path) -> None:
    """A decoded value's ``warnings`` -- its decoding's and those ``process`` adds -- are its manifest
    row's, also when its write then fails; a file skipped, or failed before its result was made (its
    error says why), has an empty list."""
    _arrays(tmp_path / "in", [10, 20, 30, 40, 50])
    (tmp_path / "in/broken.npy").write_bytes(b"not an array")
    (tmp_path / "out").mkdir()
    np.save(tmp_path / "out/x04.npy", np.zeros(1))

    def process(items: list[_Noted]) -> list[np.ndarray]:
        for it in items:
            if it.samples == 40:
                raise ValueError("40 samples cannot be processed")
            if it.samples in (20, 30):
                it.warnings.append(f"{it.samples} samples look odd")
        return [2 * it.data for it in items]

    def save(item: _Noted, result: np.ndarray, output: Path) -> None:
        if output.name == "x02.npy":
            raise ValueError("the disk said no")
        nio.write_npy(output, result)

    job = batch.Job(load=_noted_load, process=process, save=save, length=lambda a: a.samples)
    summary = batch.run(_tasks(tmp_path), job, batch_size=1, jobs=0, manifest=tmp_path / "m.jsonl")
    assert (summary.ok, summary.failed, summary.skipped) == (2, 3, 1)
    rows = {Path(r["input"]).name: (r["status"], r["warnings"]) for r in _rows(tmp_path / "m.jsonl")}
    assert rows == {
        "x00.npy": ("ok", ["decoding x00.npy noticed something"]),
        "x01.npy": ("ok", ["20 samples look odd"]),
        "x02.npy": ("failed", ["30 samples look odd"]),  # processed, then its write failed
        "x03.npy": ("failed", []),  # decoded with a warning, then processing failed
        "x04.npy": ("skipped", []),
        "broken.npy": ("failed", []),
    }


def test_run_names_the_output_not_its_temporary(tmp_path: Path) -> None:
    _arrays(tmp_path / "in", [10, 20])
    (tmp_path / "afile").write_text("a regular file where the output folder should be")
    (tmp_path / "out/x01.npy").mkdir(parents=True)  # an output that is a folder
    tasks = _tasks(tmp_path)
    tasks[0].output = tmp_path / "afile/x00.npy"
    for overwrite in (False, True):
        stream = stdio.StringIO()
        summary = batch.run(tasks, ToyJob().job(), jobs=0, overwrite=overwrite, stream=stream)
        assert (summary.failed, summary.skipped) == (2, 0)
        text = stream.getvalue()
        assert f"Not a directory: {tmp_path / 'afile/x00.npy'}" in text and ".tmp-" not in text
        assert f"{tmp_path / 'out/x01.npy'}: the output is an existing folder" in text


def test_run_failed_plans_and_progress_hidden_off_tty(tmp_path: Path) -> None:
    _arrays(tmp_path / "in", [10])
    task = batch.Task(
        tmp_path / "in/x00.npy", tmp_path / "in/x00.npy", error="refusing to overwrite the input"
    )
    stream = stdio.StringIO()
    summary = batch.run([task], ToyJob().job(), jobs=0, stream=stream)
    assert summary.failed == 1
    assert stream.getvalue() == "nbxsig: failed: refusing to overwrite the input\n"  # no progress bar


class _Terminal(stdio.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("quiet", [False, True], ids=["bar", "quiet"])
def test_progress_bar_only_on_a_terminal_and_not_quiet(tmp_path: Path, quiet: bool) -> None:
    _arrays(tmp_path / "in", [10, 20, 30])
    stream = _Terminal()
    batch.run(_tasks(tmp_path), ToyJob().job(), jobs=0, quiet=quiet, stream=stream)
    assert ("3/3" in stream.getvalue()) is not quiet
    if quiet:
        assert stream.getvalue() == ""


def test_details_mentions_the_time_split() -> None:
    s = batch.Summary(ok=3, seconds=2.0, audio_seconds=7200.0, decode_seconds=1.0, process_seconds=0.5)
    assert (
        "1.5 files/s" in s.details()
        and "1.0000 audio-hours/s" in s.details()
        and "device 0.50 s" in s.details()
    )


def test_pad_stack() -> None:
    a, b = torch.ones(2, 3), torch.full((1, 5), 2.0)
    stacked, rows = batch.pad_stack([a, b])
    assert rows == [2, 1]
    assert stacked.tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 0, 0], [2, 2, 2, 2, 2]]


def test_resolve_device() -> None:
    assert batch.resolve_device("cpu") == torch.device("cpu")
    assert batch.resolve_device("auto").type in ("cpu", "cuda")
    for bad in ("gpu", "cuda:x"):
        with pytest.raises(batch.BatchUsageError, match="--device"):
            batch.resolve_device(bad)
    if not torch.cuda.is_available():
        with pytest.raises(batch.BatchUsageError, match="no CUDA device"):
            batch.resolve_device("cuda:0")


def test_resolve_device_refuses_cuda_indices_torch_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    # Where CUDA is present these passed the check and failed in torch.device as a traceback.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    for bad in ("cuda:", "cuda:\u0663", "cuda:+1", "cuda:-1"):
        with pytest.raises(batch.BatchUsageError, match="cuda:INDEX"):
            batch.resolve_device(bad)
    assert batch.resolve_device("cuda:01") == torch.device("cuda", 1)
    assert batch.resolve_device(" CUDA ") == torch.device("cuda")
    with pytest.raises(batch.BatchUsageError, match=r"2 CUDA device\(s\), 0..1"):
        batch.resolve_device("cuda:2")


def test_load_functions_are_picklable() -> None:
    import pickle

    pickle.dumps(functools.partial(nio.read_signal, default_rate=16000))
    pickle.dumps(_toy_load)


def test_stack_padded_modes_and_mixed_dtypes() -> None:
    a = np.array([[1, 2, 3, 4]], np.int16)
    b = np.array([[0.5, -0.5]], np.float32)
    for mode, left in (
        ("reflect", [3, 2]),
        ("constant", [0, 0]),
        ("replicate", [1, 1]),
        ("circular", [3, 4]),
    ):
        stack, rows = batch.stack_padded([a], pad=2, mode=mode)
        assert stack.dtype == np.int16 and rows == [1]
        assert stack[0, :2].tolist() == left and stack[0, 2:6].tolist() == [1, 2, 3, 4]
        ref = torch.nn.functional.pad(torch.tensor([[[1.0, 2, 3, 4]]]), (2, 2), mode=mode)[0]
        assert stack.astype(np.float32).tolist() == ref.tolist()
    stack, rows = batch.stack_padded([a, b])
    assert stack.dtype == np.float32 and rows == [1, 1]
    np.testing.assert_array_equal(stack, [[1 / 32768, 2 / 32768, 3 / 32768, 4 / 32768], [0.5, -0.5, 0, 0]])
    assert batch.to_device_float(np.array([[-32768, 16384]], np.int16), "cpu").tolist() == [[-1.0, 0.5]]
    with pytest.raises(nio.InputFileError, match="too few"):
        batch.stack_padded([b], pad=2, mode="reflect")


@pytest.mark.parametrize("pad", [1, 3, 5, 6])
def test_stack_padded_reflect_in_place_equals_torch_and_fills_width(pad: int) -> None:
    # Written in place (no np.pad); includes the edge case of exactly pad + 1 samples.
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal((c, n)).astype(np.float32) for c, n in ((2, 7), (1, pad + 1), (1, 12))]
    width = 12 + 2 * pad + 5
    out = np.full((4, width), np.nan, np.float32)  # poisoned: every element must be written
    stack, rows = batch.stack_padded(arrays, pad=pad, width=width, out=out)
    assert stack is out and rows == [2, 1, 1]
    r = 0
    for a in arrays:
        ref = torch.nn.functional.pad(torch.from_numpy(a)[None], (pad, pad), mode="reflect")[0].numpy()
        n = ref.shape[-1]
        np.testing.assert_array_equal(stack[r : r + a.shape[0], :n], ref)
        assert (stack[r : r + a.shape[0], n:] == 0).all()
        r += a.shape[0]
    assert batch.stacked_shape(arrays, pad=pad, width=width) == ((4, width), np.dtype(np.float32))
    with pytest.raises(ValueError, match="out has shape"):
        batch.stack_padded(arrays, pad=pad, out=np.zeros((4, 3), np.float32))


# --------------------------------------------------------------------------------------------
# decode workers and the shared-memory arena


def _arena_left() -> bool:
    """Whether this process still has an arena (a memfd) open or mapped."""
    import gc
    import os

    gc.collect()
    fds = Path("/proc/self/fd")
    links = []
    for fd in fds.iterdir():
        with contextlib.suppress(OSError):
            links.append(os.readlink(fd))
    return (
        any("nbxsig-arena" in link for link in links) or "nbxsig-arena" in Path("/proc/self/maps").read_text()
    )


def _no_children_left() -> bool:
    import multiprocessing

    return multiprocessing.active_children() == []


def _check_doubled(tmp_path: Path, lengths: list[int]) -> None:
    for i, n in enumerate(lengths):
        got = np.load(tmp_path / f"out/x{i:02d}.npy")
        np.testing.assert_array_equal(got, 2 * np.arange(1, n + 1, dtype=np.float32)[None] / n)


def test_workers_hand_values_over_in_shared_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lengths = [300, 301, 302, 303, 304, 305, 306, 307, 5000]
    _arrays(tmp_path / "in", lengths)
    unpacked: list[int] = []
    original = batch._Arena.unpack

    def unpack(self, head, spans):
        value = original(self, head, spans)
        unpacked.append(value.samples)
        # The samples are a view of the arena, not a copy.
        assert value.data.base is not None and not value.data.flags.owndata
        return value

    monkeypatch.setattr(batch._Arena, "unpack", unpack)
    assert not _arena_left()
    arena = batch._Arena.make(4)
    assert arena is not None and _arena_left()  # the check sees an arena
    arena.close()
    del arena
    summary = batch.run(_tasks(tmp_path), ToyJob().job(), batch_size=4, jobs=2)
    assert (summary.ok, summary.failed) == (len(lengths), 0)
    assert sorted(unpacked) == sorted(lengths) and summary.piped == 0
    _check_doubled(tmp_path, lengths)
    assert not _arena_left() and _no_children_left()


def test_values_too_large_for_a_slot_travel_through_the_pipe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 4 KiB slots: 1000 float32 samples fit, 2000 do not.
    monkeypatch.setattr(batch, "_SLOT_BYTES", 4096)
    monkeypatch.setattr(batch, "_MIN_SLOT_BYTES", 4096)
    lengths = [1000, 2000, 1001, 2001, 1002, 2002]
    _arrays(tmp_path / "in", lengths)
    unpacked: list[int] = []
    original = batch._Arena.unpack
    monkeypatch.setattr(batch._Arena, "unpack", lambda self, h, s: unpacked.append(1) or original(self, h, s))
    summary = batch.run(_tasks(tmp_path), ToyJob().job(), batch_size=2, jobs=2)
    assert (summary.ok, summary.failed) == (6, 0)
    assert len(unpacked) == 3 and summary.piped == 3  # the short ones fit their slots
    assert "3 decoded values through pipes" in summary.details()
    _check_doubled(tmp_path, lengths)
    assert not _arena_left()


def test_without_shared_memory_the_pipes_carry_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(batch._Arena, "make", classmethod(lambda cls, slots: None))
    lengths = [40, 41, 42, 43, 44]
    _arrays(tmp_path / "in", lengths)
    summary = batch.run(_tasks(tmp_path), ToyJob().job(), batch_size=2, jobs=2)
    assert (summary.ok, summary.failed, summary.piped) == (5, 0, 5)
    _check_doubled(tmp_path, lengths)


def test_a_crashing_decoder_fails_only_its_file_and_leaks_nothing(tmp_path: Path) -> None:
    # The crash comes while other files are queued to the same worker: they go to a fresh one.
    from test_batch_crashloader import crashing_load

    lengths = [30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41]
    _arrays(tmp_path / "in", lengths)
    for name in ("crash1.npy", "crash2.npy"):
        np.save(tmp_path / "in" / name, np.ones((1, 30), np.float32))
    (tmp_path / "in/corrupt.npy").write_bytes(b"\x93NUMPY garbage")
    job = ToyJob().job()
    job.load = crashing_load
    stream = stdio.StringIO()
    manifest = tmp_path / "m.jsonl"
    summary = batch.run(_tasks(tmp_path), job, batch_size=3, jobs=2, stream=stream, manifest=manifest)
    assert (summary.ok, summary.failed) == (len(lengths), 3), stream.getvalue()
    text = stream.getvalue()
    assert "crash1.npy: the decoder process crashed on this file" in text
    assert "crash2.npy: the decoder process crashed on this file" in text
    assert "corrupt.npy: cannot load as a NumPy array" in text
    rows = {Path(r["input"]).name: r["status"] for r in _rows(manifest)}
    assert len(rows) == len(lengths) + 3 and list(rows.values()).count("failed") == 3
    _check_doubled(tmp_path, lengths)
    assert not _arena_left() and _no_children_left()


def test_a_worker_that_cannot_start_is_an_error_not_a_bad_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from test_batch_crashloader import unloadable_load

    _arrays(tmp_path / "in", [30, 31, 32, 33])
    job = ToyJob().job()
    job.load = unloadable_load
    with pytest.raises(batch.DecodeWorkerError, match="exited at start-up"):
        batch.run(_tasks(tmp_path), job, batch_size=2, jobs=2)
    assert not _arena_left() and _no_children_left()


def test_an_interrupted_run_stops_its_workers_and_unlinks_the_arena(tmp_path: Path) -> None:
    _arrays(tmp_path / "in", [30 + i for i in range(12)])
    toy = ToyJob()

    def process(items):
        if len(toy.batches) == 2:
            raise KeyboardInterrupt
        return toy.process(items)

    job = toy.job()
    job.process = process
    summary = batch.run(_tasks(tmp_path), job, batch_size=2, jobs=2)
    assert summary.interrupted and summary.ok >= 1
    assert not [p for p in (tmp_path / "out").rglob("*") if nio.is_temp_name(p.name)]
    assert not _arena_left() and _no_children_left()


def test_workers_decode_ahead_while_the_device_warms_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    lengths = [30 + i % 3 for i in range(40)]
    _arrays(tmp_path / "in", lengths)
    unpacked: list[int] = []
    original = batch._Arena.unpack
    monkeypatch.setattr(batch._Arena, "unpack", lambda self, h, s: unpacked.append(1) or original(self, h, s))
    toy = ToyJob()
    decoded_at_first_batch: list[int] = []

    def process(items):
        if not decoded_at_first_batch:
            decoded_at_first_batch.append(-1)
            time.sleep(3.0)  # the warm-up: a slow device start
        elif len(decoded_at_first_batch) == 1:
            decoded_at_first_batch.append(len(unpacked))
        return toy.process(items)

    job = toy.job()
    job.process, job.warm_up = process, True
    summary = batch.run(_tasks(tmp_path), job, batch_size=2, jobs=2)
    assert (summary.ok, summary.failed) == (40, 0)
    # Without decoding ahead, the first batch would find at most ~10 decoded (2 + 2 workers × 4).
    assert decoded_at_first_batch[1] >= 30, decoded_at_first_batch
    assert all(len(b) <= 2 for b in toy.batches[1:])  # buffered files still go in batches of 2
    assert not _arena_left() and _no_children_left()


def test_stale_temporaries_of_this_runs_outputs_are_removed_once(tmp_path: Path) -> None:
    _arrays(tmp_path / "in", [10, 11])
    out = tmp_path / "out"
    out.mkdir()
    (out / ".x00.npy.tmp-1-dead").write_bytes(b"partial")  # a killed run's
    (out / ".other.npy.tmp-1-live").write_bytes(b"another process's")  # not ours: kept
    summary = batch.run(_tasks(tmp_path), ToyJob().job(), jobs=0)
    assert summary.ok == 2
    assert sorted(p.name for p in out.iterdir()) == [".other.npy.tmp-1-live", "x00.npy", "x01.npy"]


@pytest.mark.parametrize(
    "array",
    [
        np.ones((1, 80, 1001), np.float32),
        np.arange(6, dtype=">i4").reshape(2, 3),
        np.zeros((0, 3), np.complex64),
        np.float64(3.5),
        np.ones((3, 4), np.float32)[:, :2],
        np.zeros(5, [("a", "f4")]),
    ],
    ids=["f32", "big-endian", "empty", "0-d", "strided", "structured"],
)
def test_write_npy_writes_the_bytes_of_np_save(tmp_path: Path, array: np.ndarray) -> None:
    nio.write_npy(tmp_path / "sub/a.npy", array)  # the folder is created on demand
    np.save(tmp_path / "ref.npy", array)
    assert (tmp_path / "sub/a.npy").read_bytes() == (tmp_path / "ref.npy").read_bytes()


@pytest.mark.parametrize("fail", [False, True])
def test_warm_up_runs_process_once_on_copies_of_the_first_input(tmp_path: Path, fail: bool) -> None:
    lengths = [50, 51, 52, 53, 54]
    _arrays(tmp_path / "in", lengths)
    toy = ToyJob()
    calls: list[int] = []

    def process(items):
        calls.append(len(items))
        if fail and len(calls) == 1:
            raise RuntimeError("the warm-up hit a device error")  # ignored: not a file's failure
        return toy.process(items)

    job = toy.job()
    job.process, job.warm_up = process, True
    summary = batch.run(_tasks(tmp_path), job, batch_size=3, jobs=0)
    assert (summary.ok, summary.failed) == (5, 0)
    assert calls[0] == 3  # batch_size copies of the first input
    assert summary.startup_seconds > 0 and "start-up" in summary.details()
    assert sum(calls[1:]) == len(lengths)  # every real file processed once after the warm-up
    for i, n in enumerate(lengths):
        got = np.load(tmp_path / f"out/x{i:02d}.npy")
        np.testing.assert_array_equal(got, 2 * np.arange(1, n + 1, dtype=np.float32)[None] / n)


def test_pending_writes_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Slow writes make the main process wait instead of holding every result in memory.
    import time

    _arrays(tmp_path / "in", [20] * 12)
    job = ToyJob().job()

    def slow_save(item, result, out):
        time.sleep(0.02)
        nio.write_npy(out, result)

    peak = [0]
    original_init, original_flush = batch._Engine.__init__, batch._Engine._flush

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        self.max_pending_saves = 2

    def flush(self, *args, **kwargs):
        original_flush(self, *args, **kwargs)
        peak[0] = max(peak[0], self.saves_pending)

    monkeypatch.setattr(batch._Engine, "__init__", init)
    monkeypatch.setattr(batch._Engine, "_flush", flush)
    job.save = slow_save
    summary = batch.run(_tasks(tmp_path), job, batch_size=1, jobs=0)
    assert summary.ok == 12
    assert peak[0] <= 3  # 12 without the bound: the 20 ms writes fall behind


# --------------------------------------------------------------------------------------------
# writes in the decode workers


def _worker_job(toy: ToyJob, save=None) -> batch.Job:
    from test_batch_crashloader import save_npy

    job = toy.job()
    job.save = save or save_npy  # picklable: the workers write
    return job


def _temporaries(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if nio.is_temp_name(p.name)]


def test_a_result_written_by_a_worker_is_byte_identical_to_a_thread_write(tmp_path: Path) -> None:
    # Two channels of different lengths in one batch: each result is a strided view of the batch,
    # which the hand-over makes contiguous.
    rng = np.random.default_rng(1)
    (tmp_path / "in").mkdir()
    lengths = [300, 310, 305, 320, 299, 315]
    for i, n in enumerate(lengths):
        np.save(tmp_path / f"in/x{i:02d}.npy", rng.standard_normal((2, n)).astype(np.float32))
    toy = ToyJob()
    results: list[np.ndarray] = []
    process = toy.process
    toy.process = lambda items: [results.append(r) or r for r in process(items)]  # type: ignore[method-assign]
    by_workers = batch.run(_tasks(tmp_path, out="w"), _worker_job(toy), batch_size=3, jobs=2)
    assert (by_workers.ok, by_workers.worker_saves) == (6, 6) and by_workers.save_seconds == 0
    assert any(not r.flags.c_contiguous for r in results)  # the case the hand-over must handle
    by_threads = batch.run(_tasks(tmp_path, out="t"), _worker_job(ToyJob()), batch_size=3, jobs=0)
    assert (by_threads.ok, by_threads.worker_saves) == (6, 0)
    for i in range(len(lengths)):
        name = f"x{i:02d}.npy"
        assert (tmp_path / "w" / name).read_bytes() == (tmp_path / "t" / name).read_bytes()
    assert "6 files" in by_workers.details() and "workers" in by_workers.details()
    assert not _arena_left() and _no_children_left()


def test_an_unpicklable_save_stays_in_threads(tmp_path: Path) -> None:
    _arrays(tmp_path / "in", [40, 41, 42, 43])
    summary = batch.run(_tasks(tmp_path), ToyJob().job(), batch_size=2, jobs=2)  # a lambda
    assert (summary.ok, summary.worker_saves) == (4, 0)
    _check_doubled(tmp_path, [40, 41, 42, 43])


def test_results_too_large_for_the_arena_are_written_in_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 8 KiB slots: a 1000-sample input (4 KB) and its result fit one slot together, or the result
    # takes a free slot of its own; a 1900-sample one fits its slot alone, its result goes to a
    # second slot; a 3000-sample one does not fit: piped in, written in a thread.
    monkeypatch.setattr(batch, "_SLOT_BYTES", 8192)
    monkeypatch.setattr(batch, "_MIN_SLOT_BYTES", 8192)
    lengths = [1000, 1900, 3000, 1001, 1901, 3001]
    _arrays(tmp_path / "in", lengths)
    summary = batch.run(_tasks(tmp_path), _worker_job(ToyJob()), batch_size=2, jobs=2)
    assert (summary.ok, summary.failed) == (6, 0)
    assert summary.worker_saves == 4 and summary.save_seconds > 0
    _check_doubled(tmp_path, lengths)
    assert not _arena_left() and _no_children_left()


def test_a_worker_that_dies_while_writing_fails_only_that_file(tmp_path: Path) -> None:
    from test_batch_crashloader import crashing_save

    lengths = [30 + i for i in range(12)]
    _arrays(tmp_path / "in", lengths)
    np.save(tmp_path / "in/crash.npy", np.ones((1, 33), np.float32))
    stream = stdio.StringIO()
    manifest = tmp_path / "m.jsonl"
    summary = batch.run(
        _tasks(tmp_path),
        _worker_job(ToyJob(), crashing_save),
        batch_size=3,
        jobs=2,
        stream=stream,
        manifest=manifest,
    )
    assert (summary.ok, summary.failed) == (len(lengths), 1), stream.getvalue()
    assert "crash.npy: the writer process crashed" in stream.getvalue()
    rows = {Path(r["input"]).name: r["status"] for r in _rows(manifest)}
    assert rows.pop("crash.npy") == "failed" and set(rows.values()) == {"ok"}
    assert not (tmp_path / "out/crash.npy").exists() and _temporaries(tmp_path / "out") == []
    _check_doubled(tmp_path, lengths)
    assert not _arena_left() and _no_children_left()


def test_a_failed_write_in_a_worker_is_a_failed_file(tmp_path: Path) -> None:
    _arrays(tmp_path / "in", [10, 20, 30, 40])
    (tmp_path / "blocker").write_text("a regular file where a folder should be")
    stream = stdio.StringIO()
    summary = batch.run(
        _tasks(tmp_path, out="blocker/out"), _worker_job(ToyJob()), batch_size=2, jobs=2, stream=stream
    )
    assert (summary.ok, summary.failed, summary.worker_saves) == (0, 4, 0)
    assert stream.getvalue().count("nbxsig: failed: ") == 4 and "blocker" in stream.getvalue()


def test_worker_writes_skip_existing_unless_overwrite(tmp_path: Path) -> None:
    _arrays(tmp_path / "in", [10, 20, 30, 40, 50])
    (tmp_path / "out").mkdir()
    np.save(tmp_path / "out/x01.npy", np.zeros(1))
    summary = batch.run(_tasks(tmp_path), _worker_job(ToyJob()), batch_size=2, jobs=2)
    assert (summary.ok, summary.skipped, summary.worker_saves) == (4, 1, 4)
    assert np.load(tmp_path / "out/x01.npy").shape == (1,)
    summary = batch.run(_tasks(tmp_path), _worker_job(ToyJob()), batch_size=2, jobs=2, overwrite=True)
    assert (summary.ok, summary.skipped, summary.worker_saves) == (5, 0, 5)
    _check_doubled(tmp_path, [10, 20, 30, 40, 50])


def test_workers_started_ahead_are_used_and_the_rest_stopped(tmp_path: Path) -> None:
    import multiprocessing

    _arrays(tmp_path / "in", [40, 41, 42, 43, 44, 45, 46, 47])
    batch.prestart_workers(3)  # one more than the run takes
    spares = {p.pid for p, _ in batch._spares}
    assert len(spares) == 3 and {p.pid for p in multiprocessing.active_children()} >= spares
    used: set[int] = set()
    original = batch._DecodePool.close

    def close(self):
        used.update(w.process.pid for w in self.workers if w is not None)
        return original(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(batch._DecodePool, "close", close)
        summary = batch.run(_tasks(tmp_path), _worker_job(ToyJob()), batch_size=2, jobs=2)
    assert (summary.ok, summary.worker_saves) == (8, 8)
    assert len(used) == 2 and used <= spares  # the spares, set up for this run
    _check_doubled(tmp_path, [40, 41, 42, 43, 44, 45, 46, 47])
    assert batch._spares == [] and not _arena_left() and _no_children_left()


def test_error_text_says_torch_cpu_allocation_failures_in_words() -> None:
    # e.g. istft --length 10000000000: the file failed with torch's C++ assertion text.
    exc = RuntimeError(
        "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you "
        "tried to allocate 400000000000 bytes. Error code 12 (Cannot allocate memory)"
    )
    assert (
        batch._error_text(Path("x.npz"), exc) == "x.npz: out of memory: the computation needs 373 GiB at once"
    )
