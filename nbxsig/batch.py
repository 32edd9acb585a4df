"""Batch machinery shared by every ``nbxsig`` command: input discovery, output mapping, skipping and
resuming, decode workers, GPU batches of similar-length files, a JSONL manifest, progress and the
closing summary.

A command describes its work as a :class:`Job` -- ``load`` (decode one file; runs in worker
processes, so it must be picklable: a module-level function or a ``functools.partial`` of one),
``process`` (a list of decoded inputs → a list of results, on the device, in the main process) and
``save`` (write one result) -- and hands it with the planned :class:`Task` list to :func:`run`.

Guarantees (the CLI's contract):

* an input is never overwritten; an existing output is skipped unless ``overwrite``;
* every output is written to a temporary sibling and renamed into place (:mod:`nbxsig.io`);
* a file that cannot be decoded, processed or written is reported and skipped, the rest goes on;
* decoding overlaps device work: ``jobs`` worker processes decode while the main process runs
  batches of files grouped by :attr:`Job.group_key` and by length (within ~9%), padded to the
  longest; ``process`` trims each result to its own length, so batching never changes a result.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import multiprocessing
import os
import signal
import sys
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from . import io as nio
from .errors import NbxsigError

#: Buckets group lengths within a factor of 2**(1/8) (≈ 9%): the padding a batch carries is at
#: most that fraction of its work.
_BUCKETS_PER_OCTAVE = 8
#: A batch is also cut when its lengths add up to this (2**26 samples: 256 MB as float32), so that
#: long files do not exhaust device memory at the default batch size.
_MAX_BATCH_LENGTH = 1 << 26
#: Writer threads: a write is mostly waiting for the disk (fsync), which threads overlap.
_SAVE_THREADS = 8


class BatchUsageError(NbxsigError, ValueError):
    """The inputs or options of a batch cannot work at all (no input found, a bad ``--shard``...).
    The CLI turns it into a usage error (exit code 2)."""


# --------------------------------------------------------------------------------------------
# Discovery and output mapping


@dataclass(frozen=True)
class Found:
    """One discovered input: its path and the path its output mirrors (relative to ``root``)."""

    path: Path
    rel: Path
    from_folder: bool


def discover(
    inputs: Sequence[str | os.PathLike[str]], *, extensions: Iterable[str], glob: str | None = None
) -> list[Found]:
    """Expand files, folders (recursively) and ``@list.txt`` files into a sorted, de-duplicated list.

    Args:
        inputs: paths; a folder is searched recursively for files whose extension is in
            ``extensions`` (or that match ``glob``, e.g. ``"*.wav"`` or ``"**/train/*.flac"``); a
            path starting with ``@`` names a text file listing one input per line (files or
            folders, relative to the list's own folder; blank lines and ``#`` comments ignored).
            A file named directly is always taken, whatever its extension, so that an unsupported
            file is reported rather than silently ignored.
        extensions: lower-case extensions with the dot, for folder searches.
        glob: a pattern replacing the extension filter in folder searches: without "/" it matches
            file names at any depth (``"*.flac"``), with "/" paths relative to the folder
            (``"**/train/*.wav"``, ``"spk1/*"``).

    Returns:
        :class:`Found` items sorted by path. Files named directly (or listed) mirror relative to
        the deepest folder common to all of them; files found in a folder mirror relative to it.
        Hidden files and folders (and nbxsig's temporaries) are skipped in folder searches.

    Raises:
        BatchUsageError: a list file cannot be read, or nothing was found at all.
    """
    extensions = tuple(e.lower() for e in extensions)
    named: list[Path] = []
    folder_found: list[Found] = []
    for spec in _expand_lists(inputs):
        path = Path(spec)
        if path.is_dir():
            for p in _walk(path, extensions, glob):
                folder_found.append(Found(p, p.relative_to(path), True))
        else:
            named.append(path)  # a missing file is reported as a failure when processed
    found = list(folder_found)
    if named:
        common = _common_parent(named)
        found.extend(Found(p, _relative(p, common), False) for p in named)
    seen: set[str] = set()
    unique = []
    for f in sorted(found, key=lambda f: (str(f.path), str(f.rel))):
        key = os.path.realpath(f.path)
        if key not in seen:
            seen.add(key)
            unique.append(f)
    if not unique:
        what = f"matching {glob!r}" if glob else "with extension " + "/".join(extensions)
        raise BatchUsageError(f"no input files {what} found in {', '.join(map(str, inputs)) or '(none)'}")
    return unique


def _expand_lists(inputs: Sequence[str | os.PathLike[str]], depth: int = 0) -> Iterator[str]:
    for spec in inputs:
        spec = os.fspath(spec)
        if spec.startswith("@") and len(spec) > 1:
            list_path = Path(spec[1:])
            try:
                lines = list_path.read_text(encoding="utf-8").splitlines()
            except (OSError, UnicodeDecodeError) as exc:
                raise BatchUsageError(f"cannot read the input list {list_path}: {exc}") from None
            entries = [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]
            base = list_path.parent
            if depth > 8:
                raise BatchUsageError(f"input lists nest too deeply at {list_path}")
            yield from _expand_lists(
                [e if e.startswith("@") or os.path.isabs(e) else str(base / e) for e in entries], depth + 1
            )
        else:
            yield spec


def _walk(folder: Path, extensions: tuple[str, ...], glob: str | None) -> Iterator[Path]:
    # A pattern without "/" matches file names at any depth (like find -name); with "/" it is a
    # path pattern relative to the folder ("**/train/*.wav").
    pattern = glob or "*"
    candidates = folder.glob(pattern) if "/" in pattern else folder.rglob(pattern)
    for p in candidates:
        rel_parts = p.relative_to(folder).parts
        if any(part.startswith(".") for part in rel_parts) or not p.is_file():
            continue
        if glob or p.suffix.lower() in extensions:
            yield p


def _common_parent(paths: list[Path]) -> Path:
    parents = [os.path.abspath(p.parent) for p in paths]
    return Path(os.path.commonpath(parents)) if parents else Path(".")


def _relative(path: Path, base: Path) -> Path:
    return Path(os.path.relpath(os.path.abspath(path), base))


def parse_shard(spec: str | None) -> tuple[int, int] | None:
    """``"K/N"`` → ``(K, N)`` with 1 ≤ K ≤ N (None → None).

    Raises:
        BatchUsageError: not of that form.
    """
    if spec is None:
        return None
    try:
        k_text, n_text = spec.split("/")
        k, n = int(k_text), int(n_text)
    except ValueError:
        raise BatchUsageError(
            f"--shard must be K/N with integers 1 ≤ K ≤ N (e.g. 1/4), got {spec!r}"
        ) from None
    if not 1 <= k <= n:
        raise BatchUsageError(f"--shard must be K/N with 1 ≤ K ≤ N (e.g. 1/4), got {spec!r}")
    return k, n


def shard(found: Sequence[Found], spec: tuple[int, int] | None) -> list[Found]:
    """The deterministic K-th of N parts of ``found``: a file belongs to part
    ``crc32(relative path) mod N + 1``, so the split does not depend on the order of the listing, and
    N processes or machines given the same inputs and ``K = 1..N`` cover every file exactly once."""
    if spec is None:
        return list(found)
    k, n = spec
    return [f for f in found if zlib.crc32(f.rel.as_posix().encode()) % n == k - 1]


@dataclass
class Task:
    """One input and the output it will produce."""

    input: Path
    output: Path | None
    error: str | None = None  # set when planning already knows the task fails


def plan(
    found: Sequence[Found],
    *,
    output: str | os.PathLike[str] | None,
    suffix: Callable[[Path], str],
    single_input: bool,
) -> tuple[list[Task], Path | None]:
    """Map inputs to outputs.

    Args:
        found: from :func:`discover`.
        output: the ``-o`` argument: None → beside each input; with ``single_input`` and a path that
            is not an existing folder and does not end with a separator → that file; otherwise a
            folder in which outputs mirror the input tree.
        suffix: the output's extension for an input path (e.g. ``lambda p: ".npz"``).
        single_input: whether exactly one file was named (no folder, no list).

    Returns:
        (tasks, output folder or None). A task whose output would overwrite an input, or collide with
        another task's output, carries an error and is reported as failed.
    """
    out_dir: Path | None = None
    out_file: Path | None = None
    if output is not None:
        text = os.fspath(output)
        if single_input and not os.path.isdir(text) and not text.endswith(("/", os.sep)):
            out_file = Path(text)
        else:
            out_dir = Path(text)
    inputs = {os.path.realpath(f.path) for f in found}
    tasks: list[Task] = []
    claimed: dict[str, Path] = {}
    for f in found:
        if out_file is not None:
            dest = out_file
        elif out_dir is not None:
            dest = out_dir / f.rel.with_suffix(suffix(f.path))
        else:
            dest = f.path.with_suffix(suffix(f.path))
        task = Task(f.path, dest)
        real = os.path.realpath(dest)
        if real in inputs:
            hint = "" if output is not None else "; name an output with -o"
            task.error = f"refusing to overwrite the input {dest}{hint}"
        elif real in claimed:
            task.error = f"its output {dest} is also the output of {claimed[real]}"
        else:
            claimed[real] = f.path
        tasks.append(task)
    return tasks, out_dir


# --------------------------------------------------------------------------------------------
# Devices


def resolve_device(spec: str) -> Any:
    """``"auto"`` (CUDA when available, else CPU), ``"cpu"``, ``"cuda"`` or ``"cuda:i"`` → torch.device.

    Raises:
        BatchUsageError: an unknown spec, or a CUDA device torch cannot see.
    """
    import torch

    spec = spec.strip().lower()
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if spec == "cpu":
        return torch.device("cpu")
    if spec == "cuda" or spec.startswith("cuda:"):
        index = spec.partition(":")[2]
        if index and not index.isdigit():
            raise BatchUsageError(f"--device must be auto, cpu, cuda or cuda:INDEX, got {spec!r}")
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise BatchUsageError(f"--device {spec}: torch sees no CUDA device (use --device cpu or auto)")
        if index and int(index) >= count:
            raise BatchUsageError(f"--device {spec}: torch sees {count} CUDA device(s), 0..{count - 1}")
        return torch.device(spec)
    raise BatchUsageError(f"--device must be auto, cpu, cuda or cuda:INDEX, got {spec!r}")


# --------------------------------------------------------------------------------------------
# Running


@dataclass
class Job:
    """What a command does with each file.

    Attributes:
        load: ``path -> decoded`` (worker process; picklable). Raise :class:`nbxsig.io.InputFileError`
            for a bad file. A decoded object may carry ``sample_rate`` and ``samples`` attributes,
            which go to the manifest and the progress bar's audio rate.
        process: ``list[decoded] -> list[result]`` (main process, on the device). Items in one call
            share a :attr:`group_key` and have similar :attr:`length`.
        save: ``(decoded, result, output_path) -> None``; must write through :mod:`nbxsig.io`'s
            atomic writers.
        group_key: items that may share a ``process`` call have equal keys (e.g. sample rate).
        length: the size that bucketing groups by (e.g. samples).
        warm_up: run ``process`` once, in a background thread, on copies of the first input while
            the workers decode the rest (results discarded): one-time device start-up -- the CUDA
            context, Triton compilation and autotuning, several seconds on a cold cache -- then
            overlaps decoding instead of stalling the first batch. For commands whose ``process``
            is pure (writes nothing) and runs compiled kernels.
        thread_load: ``path -> bool``: decode this input in a thread of the main process rather than
            in a worker process. For inputs whose decoding is little more than a copy (PCM WAV,
            ``.npy``): moving 10 s of int16 audio through a worker's pipe costs more than decoding
            it, and a process start costs ~0.3 s. ``load`` must then be thread-safe and release
            the GIL for its bulk work (libsndfile and file reads do). Worker processes remain for
            the rest, and only they isolate a crashing decoder.
    """

    load: Callable[[Path], Any]
    process: Callable[[list[Any]], list[Any]]
    save: Callable[[Any, Any, Path], None]
    group_key: Callable[[Any], Hashable] = field(default=lambda item: None)
    length: Callable[[Any], int] = field(default=lambda item: 0)
    warm_up: bool = False
    thread_load: Callable[[Path], bool] = field(default=lambda path: False)


@dataclass
class Summary:
    """Counts and where the time went."""

    ok: int = 0
    failed: int = 0
    skipped: int = 0
    seconds: float = 0.0
    audio_seconds: float = 0.0
    decode_seconds: float = 0.0  # summed over workers
    process_seconds: float = 0.0  # main process, inside Job.process (device work incl. transfers)
    save_seconds: float = 0.0  # summed over writer threads
    wait_seconds: float = 0.0  # main process idle, waiting for decoded files
    #: One-time device start-up (Job.warm_up: CUDA context, kernel compilation/autotuning), run in a
    #: background thread while files decode; ``startup_wait_seconds`` of it stalled the main process.
    startup_seconds: float = 0.0
    startup_wait_seconds: float = 0.0
    batches: int = 0
    interrupted: bool = False
    #: The signal that interrupted the run (SIGINT or SIGTERM), for the exit code 128 + signal.
    signal: int | None = None

    def line(self) -> str:
        """``"1998 ok, 2 failed, 0 skipped in 41.2 s"``."""
        text = f"{self.ok} ok, {self.failed} failed, {self.skipped} skipped in {self.seconds:.1f} s"
        return text + (" (interrupted)" if self.interrupted else "")

    def details(self) -> str:
        """Throughput and the time split, for ``--verbose``."""
        files = self.ok + self.failed
        rate = files / self.seconds if self.seconds > 0 else 0.0
        hours = self.audio_seconds / 3600 / self.seconds if self.seconds > 0 else 0.0
        text = (
            f"{rate:.1f} files/s, {hours:.4f} audio-hours/s; "
            f"decode {self.decode_seconds:.1f} s (all decoders), "
            f"device {self.process_seconds:.2f} s in {self.batches} batches, "
            f"write {self.save_seconds:.1f} s (threads), waiting for decode {self.wait_seconds:.1f} s"
        )
        if self.startup_seconds:
            text += (
                f"; start-up {self.startup_seconds:.1f} s (device init, kernel compilation; "
                f"overlapped with decoding, stalled {self.startup_wait_seconds:.1f} s)"
            )
        return text


@dataclass
class _Loaded:
    task: Task
    value: Any
    decode_seconds: float


def _worker_init() -> None:
    # Ctrl-C reaches the whole process group: the main process handles it and shuts the pool down;
    # workers ignore it instead of each printing a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _timed_load(load: Callable[[Path], Any], path: Path) -> tuple[Any, float]:
    start = time.perf_counter()
    value = load(path)
    return value, time.perf_counter() - start


class _Reporter:
    """Manifest rows, failure messages, progress bar, counts."""

    def __init__(self, *, total: int, manifest: Path | None, quiet: bool, summary: Summary, stream: TextIO):
        from tqdm import tqdm

        self.summary = summary
        self.stream = stream
        self.start = time.perf_counter()
        self.manifest_file: TextIO | None = None
        if manifest is not None:
            try:
                manifest.parent.mkdir(parents=True, exist_ok=True)
                self.manifest_file = open(manifest, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()
            except OSError as exc:
                self.message(f"nbxsig: cannot write the manifest {manifest}: {exc.strerror or exc}")
        show = not quiet and hasattr(stream, "isatty") and stream.isatty()
        self.bar = tqdm(total=total, unit="file", file=stream, disable=not show, dynamic_ncols=True)

    def message(self, text: str) -> None:
        from tqdm import tqdm

        tqdm.write(text, file=self.stream)

    def row(
        self, task: Task, status: str, *, error: str | None = None, seconds: float = 0.0, value: Any = None
    ):
        rate = getattr(value, "sample_rate", None)
        samples = getattr(value, "samples", None)
        setattr(self.summary, status, getattr(self.summary, status) + 1)
        if status == "ok" and rate and samples:
            self.summary.audio_seconds += samples / rate
        if status == "failed":
            self.message(f"nbxsig: failed: {error}")
        if self.manifest_file is not None:
            record = {
                "input": str(task.input),
                "output": str(task.output) if task.output is not None else None,
                "status": status,
                "error": error,
                "seconds": round(seconds, 6),
                "sample_rate": rate,
                "samples": samples,
            }
            self.manifest_file.write(json.dumps(record) + "\n")
            self.manifest_file.flush()
        self.bar.update(1)
        elapsed = time.perf_counter() - self.start
        if self.summary.audio_seconds and elapsed > 0:
            self.bar.set_postfix_str(f"{self.summary.audio_seconds / elapsed:.0f} audio-s/s", refresh=False)

    def close(self) -> None:
        self.bar.close()
        if self.manifest_file is not None:
            self.manifest_file.close()


def _error_text(path: Path, exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, OSError) and exc.strerror:
        where = exc.filename or path
        text = f"{exc.strerror}: {where}"
    return text if str(path) in text else f"{path}: {text}"


def run(
    tasks: Sequence[Task],
    job: Job,
    *,
    batch_size: int = 32,
    jobs: int = 0,
    overwrite: bool = False,
    manifest: Path | None = None,
    quiet: bool = False,
    stream: TextIO | None = None,
) -> Summary:
    """Run ``job`` over ``tasks``; never raises for a bad file (it is counted as failed).

    Args:
        tasks: from :func:`plan`.
        job: the command's work.
        batch_size: at most this many files per ``process`` call.
        jobs: decode worker processes; 0 decodes in the main process.
        overwrite: replace existing outputs instead of skipping them (inputs are never replaced).
        manifest: where to write one JSON line per task (None: no manifest).
        quiet: no progress bar (it is also hidden when ``stream`` is not a terminal).
        stream: where progress and failure messages go (default: sys.stderr).

    Returns:
        :class:`Summary`. ``summary.interrupted`` is set after Ctrl-C/SIGTERM; outputs already
        written stay, and no partial output is left.
    """
    summary = Summary()
    start = time.perf_counter()
    reporter = _Reporter(
        total=len(tasks), manifest=manifest, quiet=quiet, summary=summary, stream=stream or sys.stderr
    )
    todo: list[Task] = []
    for task in tasks:
        if task.error is not None:
            reporter.row(task, "failed", error=task.error)
        elif task.output is not None and task.output.exists() and not overwrite:
            reporter.row(task, "skipped", error=None)
        else:
            todo.append(task)
    previous = _raise_on_sigterm()
    try:
        _Engine(todo, job, batch_size=max(1, batch_size), jobs=max(0, jobs), reporter=reporter).run()
    except _Terminated:
        summary.interrupted, summary.signal = True, signal.SIGTERM
    except KeyboardInterrupt:
        summary.interrupted, summary.signal = True, signal.SIGINT
    finally:
        _restore_sigterm(previous)
        reporter.close()
        summary.seconds = time.perf_counter() - start
    return summary


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread."""


def _raise_on_sigterm() -> Any:
    # SIGTERM (the default of `kill`, `timeout`, job schedulers) becomes an exception so that the
    # atomic writers' cleanup runs and no temporary is left behind.
    def handler(signum: int, frame: Any) -> None:
        raise _Terminated

    try:
        return signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        return None


def _restore_sigterm(previous: Any) -> None:
    if previous is not None:
        with contextlib.suppress(ValueError):
            signal.signal(signal.SIGTERM, previous)


class _Engine:
    """Decode in workers → bucket by (group key, length) → process in batches → save in threads."""

    def __init__(self, todo: list[Task], job: Job, *, batch_size: int, jobs: int, reporter: _Reporter):
        self.todo = deque(todo)
        self.job = job
        self.batch_size = batch_size
        # A worker costs a process start (~0.3 s); give each at least ~4 files, none for one file.
        self.jobs = min(jobs, (len(todo) + 3) // 4) if len(todo) > 1 else 0
        self.reporter = reporter
        self.summary = reporter.summary
        self.buckets: dict[Hashable, list[_Loaded]] = {}
        self.buffered = 0
        # Enough decodes in flight to fill the next batch while the current one runs.
        self.max_in_flight = max(2 * self.jobs, batch_size + self.jobs)
        self.max_buffered = 2 * batch_size + self.jobs
        # Results waiting for a writer: beyond this the main process waits for writes (memory bound).
        self.max_pending_saves = max(4 * batch_size, 64)
        self.warm_thread: threading.Thread | None = None

    def run(self) -> None:
        # Writes (encode + fsync) overlap each other and the device work. fsync waits on the disk,
        # not the CPU, so more threads than cores help: their syncs share journal commits.
        saver = ThreadPoolExecutor(max_workers=_SAVE_THREADS, thread_name_prefix="nbxsig-save")
        self.saves: list[tuple[Future, _Loaded, float]] = []
        if self.job.warm_up and self.todo:
            self._start_warm_up(self.todo[0])
        self.pool: ProcessPoolExecutor | None = None
        self.threads: ThreadPoolExecutor | None = None
        try:
            if self.jobs == 0:
                while self.todo:
                    task = self.todo.popleft()
                    try:
                        value, seconds = _timed_load(self.job.load, task.input)
                    except Exception as exc:
                        self.reporter.row(task, "failed", error=_error_text(task.input, exc))
                        continue
                    self._add(_Loaded(task, value, seconds), saver)
                    self._drain_saves(block=False)
            else:
                self._pump(saver)
            for key in list(self.buckets):
                self._flush(key, saver)
            self._join_warm_up()  # not left compiling at exit when every input failed
            self._drain_saves(block=True)
        finally:
            if self.pool is not None:
                self.pool.shutdown(wait=False, cancel_futures=True)
            if self.threads is not None:
                self.threads.shutdown(wait=False, cancel_futures=True)
            saver.shutdown(wait=True, cancel_futures=True)
            # Saves that ran before an interruption still count.
            self._drain_saves(block=False)

    def _start_warm_up(self, first: Task) -> None:
        batch = self.batch_size

        def warm_up() -> None:
            t0 = time.perf_counter()
            # Errors are the real batch's to report (this file fails there, or another works).
            with contextlib.suppress(Exception):
                value = self.job.load(first.input)
                length = max(1, int(self.job.length(value)))
                copies = max(1, min(batch, _MAX_BATCH_LENGTH // length))
                self.job.process([value] * copies)
            self.summary.startup_seconds = time.perf_counter() - t0

        # A daemon: an interrupted run must not wait for a compilation to finish.
        self.warm_thread = threading.Thread(target=warm_up, name="nbxsig-warm-up", daemon=True)
        self.warm_thread.start()

    def _join_warm_up(self) -> None:
        # process() is not re-entrant (Triton's autotuner keeps per-call state): the first batch
        # waits for the warm-up, which has by then compiled what the batch needs.
        if self.warm_thread is not None:
            t0 = time.perf_counter()
            while self.warm_thread.is_alive():
                self.warm_thread.join(0.1)  # short joins: Ctrl-C/SIGTERM stay responsive
            self.summary.startup_wait_seconds = time.perf_counter() - t0
            self.warm_thread = None

    def _submit(self, task: Task, *, process: bool = False) -> tuple[Future, bool]:
        """Start decoding ``task``: in a thread where the job says its load is a cheap copy (no
        pickling through a pipe, no process start), else in a worker process (started on first use).
        Returns the future and whether a process runs it."""
        if not process and self.job.thread_load(task.input):
            if self.threads is None:
                self.threads = ThreadPoolExecutor(max_workers=self.jobs, thread_name_prefix="nbxsig-decode")
            return self.threads.submit(_timed_load, self.job.load, task.input), False
        if self.pool is None:
            # spawn, not fork: the main process may hold a CUDA context, which a forked child cannot use.
            self.pool = ProcessPoolExecutor(
                max_workers=self.jobs,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_worker_init,
            )
        return self.pool.submit(_timed_load, self.job.load, task.input), True

    def _pump(self, saver: ThreadPoolExecutor) -> None:
        in_flight: dict[Future, Task] = {}
        in_process: set[Future] = set()
        # Files that were being decoded when a worker died. One of them killed it; decoding them
        # one at a time finds which, without blaming the others.
        suspects: deque[Task] = deque()
        alone: Task | None = None
        while self.todo or in_flight or suspects:
            if suspects:
                if not in_flight:
                    alone = suspects.popleft()
                    fut, _ = self._submit(alone, process=True)
                    in_flight[fut] = alone
                    in_process.add(fut)
            else:
                alone = None
                while self.todo and len(in_flight) < self.max_in_flight:
                    task = self.todo.popleft()
                    fut, by_process = self._submit(task)
                    in_flight[fut] = task
                    if by_process:
                        in_process.add(fut)
            t0 = time.perf_counter()
            done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
            self.summary.wait_seconds += time.perf_counter() - t0
            broken = False
            for fut in done:
                task = in_flight.pop(fut)
                in_process.discard(fut)
                try:
                    value, seconds = fut.result()
                except BrokenProcessPool:
                    broken = True
                    if task is alone:
                        error = f"{task.input}: the decoder process crashed on this file"
                        self.reporter.row(task, "failed", error=error)
                    else:
                        suspects.append(task)
                    continue
                except Exception as exc:
                    self.reporter.row(task, "failed", error=_error_text(task.input, exc))
                    continue
                self._add(_Loaded(task, value, seconds), saver)
            if broken:
                # The pool is unusable after a worker death: every decode queued in it is lost with
                # it (decodes in threads go on); the next process decode starts a fresh pool.
                for fut in in_process:
                    suspects.append(in_flight.pop(fut))
                in_process.clear()
                assert self.pool is not None
                self.pool.shutdown(wait=False, cancel_futures=True)
                self.pool = None
            self._drain_saves(block=False)

    def _add(self, loaded: _Loaded, saver: ThreadPoolExecutor) -> None:
        length = max(1, int(self.job.length(loaded.value)))
        key = (self.job.group_key(loaded.value), int(math.log2(length) * _BUCKETS_PER_OCTAVE))
        self.summary.decode_seconds += loaded.decode_seconds
        bucket = self.buckets.setdefault(key, [])
        bucket.append(loaded)
        self.buffered += 1
        if (
            len(bucket) >= self.batch_size
            or sum(self.job.length(b.value) for b in bucket) >= _MAX_BATCH_LENGTH
        ):
            self._flush(key, saver)
        elif self.buffered > self.max_buffered:
            self._flush(max(self.buckets, key=lambda k: len(self.buckets[k])), saver)

    def _flush(self, key: Hashable, saver: ThreadPoolExecutor) -> None:
        items = self.buckets.pop(key, [])
        self.buffered -= len(items)
        if not items:
            return
        self._join_warm_up()
        if len(self.saves) > self.max_pending_saves:
            self._drain_saves(block=True, keep=self.max_pending_saves // 2)
        t0 = time.perf_counter()
        try:
            results = self.job.process([it.value for it in items])
            if len(results) != len(items):
                raise RuntimeError(f"process returned {len(results)} results for {len(items)} inputs")
            outcomes: list[tuple[_Loaded, Any, BaseException | None]] = [
                (it, r, None) for it, r in zip(items, results, strict=True)
            ]
        except Exception:
            if len(items) == 1:
                outcomes = [(items[0], None, sys.exc_info()[1])]
            else:
                # One bad file must not sink its batch: redo the batch file by file.
                outcomes = []
                for it in items:
                    try:
                        outcomes.append((it, self.job.process([it.value])[0], None))
                    except Exception as exc:
                        outcomes.append((it, None, exc))
        elapsed = time.perf_counter() - t0
        self.summary.process_seconds += elapsed
        self.summary.batches += 1
        share = elapsed / len(items)
        for it, result, exc in outcomes:
            if exc is not None:
                self.reporter.row(
                    it.task,
                    "failed",
                    error=_error_text(it.task.input, exc),
                    seconds=it.decode_seconds + share,
                )
                continue
            fut = saver.submit(self._save, it, result)
            self.saves.append((fut, it, it.decode_seconds + share))

    def _save(self, loaded: _Loaded, result: Any) -> float:
        t0 = time.perf_counter()
        assert loaded.task.output is not None
        nio.remove_stale_temps(loaded.task.output)
        self.job.save(loaded.value, result, loaded.task.output)
        return time.perf_counter() - t0

    def _drain_saves(self, *, block: bool, keep: int = 0) -> None:
        """Report finished saves; with ``block``, wait until at most ``keep`` (the newest) are left."""
        remaining = []
        wait_for = len(self.saves) - keep if block else 0
        for i, (fut, it, seconds) in enumerate(self.saves):
            if not fut.done() and i >= wait_for:
                remaining.append((fut, it, seconds))
                continue
            if fut.cancelled():
                continue
            try:
                save_seconds = fut.result()
            except Exception as exc:
                self.reporter.row(it.task, "failed", error=_error_text(it.task.output or it.task.input, exc))
                continue
            self.summary.save_seconds += save_seconds
            self.reporter.row(it.task, "ok", seconds=seconds + save_seconds, value=it.value)
        self.saves = remaining


# --------------------------------------------------------------------------------------------
# Helpers for commands' process functions


def pad_stack(arrays: Sequence[Any], *, value: float = 0.0) -> tuple[Any, list[int]]:
    """Stack ``(C_i, L_i)`` float tensors into ``(sum C_i, max L_i)``, zero-padded on the right;
    returns the stack and each item's row count."""
    import torch

    longest = max(a.shape[-1] for a in arrays)
    rows = [a.shape[0] for a in arrays]
    out = torch.full((sum(rows), longest), value, dtype=arrays[0].dtype, device=arrays[0].device)
    r = 0
    for a in arrays:
        out[r : r + a.shape[0], : a.shape[-1]] = a
        r += a.shape[0]
    return out, rows


_NUMPY_PAD = {"reflect": "reflect", "constant": "constant", "replicate": "edge", "circular": "wrap"}


def stack_padded(
    arrays: Sequence[np.ndarray],
    *,
    pad: int = 0,
    mode: str = "reflect",
    width: int = 0,
    out: np.ndarray | None = None,
) -> tuple[np.ndarray, list[int]]:
    """On the CPU, pad each ``(C_i, L_i)`` array by ``pad`` samples on both sides with ``mode`` (torch's
    names: reflect, constant, replicate, circular), then stack them zero-padded on the right into
    ``(sum C_i, max(max padded length, width))`` (one host-to-device copy for the batch); returns it
    and the row counts. The dtype is kept (int16 PCM stays int16) where all arrays share it; mixed
    int16 and float arrays all become float32 (int16 ÷ 32768).

    ``out``, when given, receives the stack (e.g. a pinned buffer's NumPy view, for an asynchronous
    copy to the device); it must have that shape and dtype (see :func:`stacked_shape`)."""
    if len({a.dtype for a in arrays}) > 1:
        arrays = [
            a.astype(np.float32) * np.float32(1 / 32768) if a.dtype == np.int16 else a.astype(np.float32)
            for a in arrays
        ]
    if pad and mode == "reflect":
        for a in arrays:
            if a.shape[-1] <= pad:
                raise nio.InputFileError(f"{a.shape[-1]} samples are too few for reflect padding by {pad}")
    shape, dtype = stacked_shape(arrays, pad=pad, width=width)
    if out is None:
        out = np.empty(shape, dtype=dtype)
    elif out.shape != shape or out.dtype != dtype:
        raise ValueError(f"out has shape {out.shape} {out.dtype}, the stack needs {shape} {dtype}")
    rows = [a.shape[0] for a in arrays]
    r = 0
    for a in arrays:
        c, n = a.shape
        block = out[r : r + c]
        if pad and mode == "reflect":
            # Written in place rather than through np.pad: one copy of the batch instead of two.
            block[:, pad : pad + n] = a
            block[:, :pad] = a[:, pad:0:-1]
            block[:, pad + n : n + 2 * pad] = (
                a[:, n - 2 : n - 2 - pad : -1] if n - 2 - pad >= 0 else a[:, n - 2 :: -1]
            )
        elif pad:
            block[:, : n + 2 * pad] = np.pad(a, ((0, 0), (pad, pad)), mode=_NUMPY_PAD[mode])
        else:
            block[:, :n] = a
        block[:, n + 2 * pad :] = 0
        r += c
    return out, rows


def stacked_shape(
    arrays: Sequence[np.ndarray], *, pad: int = 0, width: int = 0
) -> tuple[tuple[int, int], Any]:
    """The shape and dtype :func:`stack_padded` produces for these arguments."""
    dtypes = {a.dtype for a in arrays}
    dtype = arrays[0].dtype if len(dtypes) == 1 else np.dtype(np.float32)
    longest = max(a.shape[-1] for a in arrays) + 2 * pad
    return (sum(a.shape[0] for a in arrays), max(longest, width)), dtype


def to_device_float(stack: Any, device: Any) -> Any:
    """One copy to ``device`` (asynchronous from a pinned tensor); int16 PCM becomes float32 there
    (÷32768, exact)."""
    import torch

    x = stack if isinstance(stack, torch.Tensor) else torch.from_numpy(stack)
    # non_blocking only from pinned memory (asking is_pinned() of a CPU-only run would start CUDA).
    x = x.to(device, non_blocking=torch.device(device).type == "cuda" and x.is_pinned())
    return x.float() * (1.0 / 32768.0) if x.dtype == torch.int16 else x


@functools.cache
def _cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def default_jobs() -> int:
    """Decode workers by default: the CPUs available, at most 8."""
    return min(8, _cpu_count())
