"""Options and the run loop shared by the batch commands."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import os
import sys
import threading
import warnings
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from nbxsig import batch
from nbxsig import io as nio

WINDOWS = ("hann", "hamming", "blackman", "ones")


@dataclass
class BatchOptions:
    output: str | None
    overwrite: bool
    manifest: str | None
    quiet: bool
    verbose: bool
    shard: str | None
    glob: str | None
    jobs: int | None
    batch_size: int
    device: str


def batch_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Add the options every batch command takes; the command receives them as ``opts``."""
    options = [
        click.option(
            "-o",
            "--output",
            metavar="OUT",
            help="Output file (one input) or folder (mirrors the input tree). Default: beside each input.",
        ),
        click.option("--overwrite", is_flag=True, help="Replace existing outputs (default: skip them)."),
        click.option(
            "--manifest",
            metavar="PATH",
            help="JSONL manifest, one row per input. Default: OUT/manifest.jsonl when OUT is a folder "
            "(OUT/manifest.shard-K-of-N.jsonl with --shard K/N).",
        ),
        click.option("-q", "--quiet", is_flag=True, help="No progress bar and no summary line."),
        click.option("-v", "--verbose", is_flag=True, help="Also print throughput and where the time went."),
        click.option(
            "--shard", metavar="K/N", help="Process only the K-th of N deterministic parts (1 ≤ K ≤ N)."
        ),
        click.option(
            "--glob", metavar="PATTERN", help="Select files in folders by this pattern (e.g. '*.flac')."
        ),
        click.option(
            "-j",
            "--jobs",
            type=click.IntRange(min=0),
            default=None,
            help="Decode worker processes (0: decode in the main process). Default: CPUs, at most 8.",
        ),
        click.option(
            "--batch-size",
            type=click.IntRange(min=1),
            default=32,
            show_default=True,
            help="Files per device batch (files of similar length are batched together).",
        ),
        click.option(
            "--device",
            default="auto",
            show_default=True,
            metavar="auto|cpu|cuda[:i]",
            help="Where to compute; auto is CUDA when available.",
        ),
    ]
    names = [
        "output",
        "overwrite",
        "manifest",
        "quiet",
        "verbose",
        "shard",
        "glob",
        "jobs",
        "batch_size",
        "device",
    ]

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        opts = BatchOptions(**{name: kwargs.pop(name) for name in names})
        inputs = kwargs.get("inputs", ())
        if len(inputs) > 1 or any(i.startswith("@") or os.path.isdir(i) for i in inputs):
            # A batch: its decode workers start now, while the command imports torch and starts the
            # device (not for a single file, which is decoded in the main process).
            batch.prestart_workers(batch.default_jobs() if opts.jobs is None else opts.jobs)
        try:
            return f(*args, opts=opts, **kwargs)
        finally:
            batch.stop_spare_workers()

    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper


def resolve_device(opts: BatchOptions) -> Any:
    try:
        return batch.resolve_device(opts.device)
    except batch.BatchUsageError as exc:
        raise click.BadParameter(str(exc), param_hint="--device") from None


def execute(
    inputs: Sequence[str],
    opts: BatchOptions,
    job: batch.Job,
    *,
    extensions: Sequence[str],
    suffix: Callable[[Path], str],
    output_extensions: Sequence[str],
    protect: Sequence[str] = (),
    started: threading.Thread | None = None,
) -> None:
    """Discover, shard, plan, run, print the summary and exit 1 if any input failed.

    ``output_extensions``: what an output file named with ``-o`` may end with (the formats the
    command writes). ``protect``: other files the user gave (``--taps``...), which no output or
    manifest may replace. ``started``: a device start-up running meanwhile
    (:func:`nbxsig.batch.start_device`), joined before the command returns."""
    try:
        _execute(
            inputs,
            opts,
            job,
            extensions=extensions,
            suffix=suffix,
            output_extensions=output_extensions,
            protect=protect,
        )
    finally:
        while started is not None and started.is_alive():
            started.join(0.1)  # short joins: Ctrl-C stays responsive


def _manifest_name(shard: str | None) -> str:
    """The default manifest's name in the output folder: one per shard, since shards sharing ``-o``
    run at once and each writes its own manifest (one shared name would have them replace each
    other's)."""
    spec = batch.parse_shard(shard)
    return "manifest.jsonl" if spec is None else f"manifest.shard-{spec[0]}-of-{spec[1]}.jsonl"


def _execute(
    inputs: Sequence[str],
    opts: BatchOptions,
    job: batch.Job,
    *,
    extensions: Sequence[str],
    suffix: Callable[[Path], str],
    output_extensions: Sequence[str],
    protect: Sequence[str],
) -> None:
    try:
        # An output folder inside a searched input folder must not feed the next run its outputs.
        found = batch.discover(inputs, extensions=extensions, glob=opts.glob, exclude=opts.output)
        taken, aside = batch.set_aside_outputs(found)
        part = batch.shard(taken, batch.parse_shard(opts.shard))
    except batch.BatchUsageError as exc:
        raise click.UsageError(str(exc)) from None
    if aside and not opts.quiet:
        first = ", ".join(str(f.path) for f in aside[:3]) + (" ..." if len(aside) > 3 else "")
        click.echo(
            f"left alone: {len(aside)} array file(s) beside audio of the same name, taken as outputs of an "
            f"earlier run, not inputs ({first}); name them, or use --glob, to process them",
            err=True,
        )
    single = len(inputs) == 1 and not inputs[0].startswith("@") and not os.path.isdir(inputs[0])
    # Another shard's input is still the user's file: no output of this shard may replace it.
    in_part = set(part)
    other_shards = [f.path for f in taken if f not in in_part]
    tasks, out_dir = batch.plan(
        part,
        output=opts.output,
        suffix=suffix,
        single_input=single,
        protect=[*other_shards, *protect],
        aside=aside,
    )
    if opts.output is not None and out_dir is None:
        _check_output_file(opts.output, output_extensions)
    manifest = (
        Path(opts.manifest) if opts.manifest else (out_dir / _manifest_name(opts.shard) if out_dir else None)
    )
    if manifest is not None:
        try:
            batch.check_manifest(manifest, inputs=inputs, found=found, tasks=tasks, protect=protect)
        except batch.BatchUsageError as exc:
            hint = "--manifest" if opts.manifest else "-o/--output"
            raise click.BadParameter(str(exc), param_hint=hint) from None
    jobs = batch.default_jobs() if opts.jobs is None else opts.jobs
    # A warning raised while a batch is computed (by nbxsig, torch, numpy...) becomes the CLI's own
    # line naming the batch's files, not a raw "file.py:123: UserWarning" line.
    process = functools.partial(_process_reporting_warnings, process=job.process, notice=Notice())
    summary = batch.run(
        tasks,
        dataclasses.replace(job, process=process),
        batch_size=opts.batch_size,
        jobs=jobs,
        overwrite=opts.overwrite,
        manifest=manifest,
        quiet=opts.quiet,
        stream=sys.stderr,
    )
    if not opts.quiet:
        click.echo(summary.line(), err=True)
    if opts.verbose:
        click.echo(summary.details(), err=True)
    if summary.interrupted:
        sys.exit(128 + int(summary.signal or 2))
    if summary.failed or summary.manifest_error:
        sys.exit(1)


def _check_output_file(output: str, allowed: Sequence[str]) -> None:
    """An output file's extension chooses its format: refuse one the command cannot write rather
    than write, say, .npy bytes under a .wav name."""
    ext = Path(output).suffix.lower()
    if ext not in allowed:
        raise click.BadParameter(
            f"{output}: the output file must end with {', '.join(allowed)}, not {ext or '(no extension)'} "
            "(to name a folder, end the path with /)",
            param_hint="-o/--output",
        )


class FiniteFloat(click.FloatRange):
    """A float option that refuses nan and ±inf too: click's ranges let nan through (every comparison
    with it is false), and a nan threshold or cut-off silently gives nothing or garbage."""

    name = "finite float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number

    def _describe_range(self) -> str:
        # Without bounds click would show "x<=None" in the help.
        return super()._describe_range() if self.min is not None or self.max is not None else ""


class Notice:
    """Prints a message on stderr once per run (e.g. an assumed sample rate)."""

    def __init__(self) -> None:
        self.said: set[Hashable] = set()

    def __call__(self, text: str, *, key: Hashable = None) -> None:
        """``nbxsig: TEXT``, once per ``key`` (default: per text)."""
        key = text if key is None else key
        if key not in self.said:
            self.said.add(key)
            click.echo(f"nbxsig: {text}", err=True)

    def warning(self, where: str, text: str, *, key: Hashable = None) -> None:
        """``nbxsig: warning: WHERE: TEXT`` -- a file's (or a batch's files') result is written but may
        not be what was meant -- once per ``key`` (default: per text, naming where it was first seen)."""
        # A file name undecodable in the locale's encoding is shown with replacement characters.
        where = click.format_filename(where)
        self(f"warning: {where}: {text}", key=("warning", text) if key is None else key)

    def file_warning(
        self, items: Sequence[Any], text: str, *, named: Sequence[Any] | None = None, key: Hashable = None
    ) -> None:
        """A warning about the files of ``items`` (decoded inputs, e.g. a batch's): kept in each one's
        ``warnings``, which its manifest row records (every file, every run), and said as
        :meth:`warning` does (once per ``key``), naming the files of ``named`` (default: ``items``)."""
        for it in items:
            if text not in it.warnings:
                it.warnings.append(text)
        self.warning(where(items if named is None else named), text, key=key)


@contextlib.contextmanager
def caught_warnings() -> Iterator[list[str]]:
    """Collects the messages of the Python warnings raised inside the block (by nbxsig, torch, numpy,
    PIL...) into the list it yields, once each, instead of printing them as raw ``file.py:123:
    UserWarning: ...`` lines; the caller reports them in the CLI's words. The warning filters stay as
    they are (``-W``, ``PYTHONWARNINGS``): an ignored warning stays ignored, ``-W error`` still raises.
    The list stays empty when the block raises (a failed file is reported by its error).

    Not for code running in two threads at once: ``warnings.catch_warnings`` swaps module-wide state.
    """
    texts: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        yield texts
    texts.extend(dict.fromkeys(str(w.message) for w in caught))


def where(items: Sequence[Any]) -> str:
    """The input files of a batch, for a message: ``a.wav``, ``a.wav, b.wav``, ``a.wav, b.wav and 3
    more`` (items carry the ``path`` their loader gave them)."""
    names = [str(getattr(it, "path", "") or "?") for it in items]
    names = list(dict.fromkeys(names))
    return ", ".join(names) if len(names) <= 2 else f"{', '.join(names[:2])} and {len(names) - 2} more"


def _process_reporting_warnings(items: list[Any], *, process: Callable[..., Any], notice: Notice) -> Any:
    """``process(items)``, its warnings said as the CLI's lines naming the batch's files and kept for
    each file's manifest row: a warning raised while the batch is computed cannot tell which of its
    files it is about."""
    with caught_warnings() as texts:
        results = process(items)
    for text in texts:
        notice.file_warning(items, text)
    return results


@dataclass
class Signal(nio.Audio):
    """:class:`nbxsig.io.Audio` that knows its file, for the CLI's per-file messages, and what the CLI
    warned about it (:meth:`Notice.file_warning`), for its manifest row."""

    path: str = ""
    warnings: list[str] = dataclasses.field(default_factory=list)


def read_signal(path: Path, **kwargs: Any) -> Signal:
    """:func:`nbxsig.io.read_signal` (same arguments), keeping the file's name."""
    audio = nio.read_signal(path, **kwargs)
    fields = {f.name: getattr(audio, f.name) for f in dataclasses.fields(audio)}
    return Signal(**fields, path=str(path))


def make_window(name: str, win_length: int, *, device: Any) -> Any:
    """A periodic window (the CLI's default is a periodic Hann)."""
    import torch

    if name == "ones":
        return torch.ones(win_length, device=device)
    fn = {"hann": torch.hann_window, "hamming": torch.hamming_window, "blackman": torch.blackman_window}[name]
    return fn(win_length, periodic=True, device=device)


def keep_subtype(path: Path, subtype: str | None) -> str | None:
    """The input's subtype where the output format can hold it, else the format's default."""
    import soundfile

    from nbxsig.io import _AUDIO_FORMATS

    fmt = _AUDIO_FORMATS.get(path.suffix.lower())
    if subtype and fmt and soundfile.check_format(fmt, subtype):
        return subtype
    return None
