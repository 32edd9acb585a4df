"""``nbxsig mel``."""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import numpy as np
from click.core import ParameterSource

from nbxsig import batch
from nbxsig import io as nio

from ._common import (
    BatchOptions,
    FiniteFloat,
    Notice,
    batch_options,
    caught_warnings,
    execute,
    read_signal,
    resolve_device,
)

#: Rate assumed for .npy waveforms when --sample-rate is not given.
DEFAULT_ARRAY_RATE = 16000
#: What the device start-up thread imports for a mel run: the kernels of the mel path (fourstep imports
#: mel and stft, whose custom ops register on import).
MEL_MODULES = ("nbxsig.features", "nbxsig.kernels.fourstep")


@dataclass(frozen=True)
class MelParams:
    sample_rate: int | None  # None: each file's own rate
    n_fft: int
    hop_length: int
    n_mels: int
    f_min: float
    f_max: float | None
    log: bool
    whisper: bool


def mel_process(
    items: list[nio.Audio],
    *,
    p: MelParams,
    device: Any,
    notice: Notice,
    clock: batch.DeviceClock | None = None,
    hint: str | None = None,
) -> list[np.ndarray]:
    """Batched (log-)mel spectrograms equal to per-file ones: each file is resampled (when
    --sample-rate asks) and reflect-padded by n_fft // 2 on its own, the batch is zero-padded to the
    longest and transformed with center=False, and each file's frames are cut back to its own count.
    Whisper's per-example floor needs the exact frames, so Whisper batches hold equal lengths only.
    Without resampling the batch is assembled on the CPU and moved in one copy (int16 PCM as is).
    ``clock``, when given, adds up the device time from the copy in to the copy out. Mel filters left
    empty at the batch's rate are a warning naming a file (``hint``: the options that fix it)."""
    import torch

    for it in items:
        if it.rate_assumed and p.sample_rate is None:
            notice(f"arrays carry no sample rate; assuming {it.sample_rate} Hz (--sample-rate)")
    rate = items[0].sample_rate  # the group key makes the rates equal
    target = 16000 if p.whisper else (p.sample_rate or rate)
    if not p.whisper and p.f_min >= target // 2:
        # The command refuses this band up front where --sample-rate fixes the rate; at each file's own
        # rate it is known only here. The spectrum's top bin is at target // 2 (the library's default
        # f_max): f_min there gave all-zero features with a warning (above it the library refused
        # f_min > f_max), and with an --f-max past Nyquist, all-zero features whatever f_min; at 1 Hz
        # (Nyquist 0 Hz) even f_min 0 is there, and the 0..0 Hz band gave NaN features without a word.
        # (vad has no --f-min: at f_min 0 the rate alone is at fault.)
        edge = f"--f-min {p.f_min:g} Hz is not below" if p.f_min > 0 else "no band lies below"
        raise nio.InputFileError(
            f"{edge} the Nyquist frequency of {target} Hz audio ({target // 2} Hz): no frequency bin "
            "lies in the band, every mel would be 0"
        )
    half = 0 if p.whisper else p.n_fft // 2
    if target == rate:
        arrays = [it.data for it in items]
        lengths = [it.samples for it in items]
    else:
        import nbxsig.filters

        arrays = [
            nbxsig.filters.resample(batch.to_device_float(it.data, device), rate, target).cpu().numpy()
            for it in items
        ]
        lengths = [a.shape[-1] for a in arrays]
    # Centre padding reflects n_fft // 2 samples (Whisper's own too, n_fft 400), which needs more than
    # that, as torch's reflect padding does: said in the CLI's words, not the padding's.
    reflected = 200 if p.whisper else half
    if min(lengths) <= reflected:
        at = f" at {target} Hz" if target != rate else ""
        raise nio.InputFileError(
            f"{min(lengths)} samples{at} are too few for n_fft {400 if p.whisper else p.n_fft}: centre "
            f"padding reflects n_fft // 2 = {reflected} samples, which needs more than that"
        )
    frames = [1 + (n + 2 * half - p.n_fft) // p.hop_length for n in lengths]
    # Whisper batches hold equal lengths (30 s after its own padding): nothing to align.
    width = 0 if p.whisper else _aligned_width(max(lengths) + 2 * half, p)
    shape, dtype = batch.stacked_shape(arrays, pad=half, width=width)
    # Pinned host memory: the copy to the device is asynchronous and at full PCIe rate.
    cuda = torch.device(device).type == "cuda"
    host = torch.empty(shape, dtype=torch.from_numpy(np.empty(0, dtype)).dtype, pin_memory=cuda)
    batch.stack_padded(arrays, pad=half, mode="reflect", width=width, out=host.numpy())
    empty = None if p.whisper else empty_mel_filters(p.n_fft, p.n_mels, p.f_min, p.f_max, target)
    with clock.measure(device) if clock is not None else contextlib.nullcontext():
        with caught_warnings() as texts:
            mel = _mel(batch.to_device_float(host, device), p, target).to(torch.float32)
        if cuda:
            # One pinned, asynchronous copy back, then one wait (a pageable copy stages through a
            # bounce buffer at a fraction of the rate).
            host_mel = torch.empty(mel.shape, dtype=torch.float32, pin_memory=True)
            host_mel.copy_(mel, non_blocking=True)
            torch.cuda.current_stream(mel.device).synchronize()
        else:
            host_mel = mel
    for text in texts:  # the library's warning about empty filters is said below, in the CLI's words
        if empty is None or text != empty.library_text:
            notice.file_warning(items, text)
    if empty is not None:
        if hint is None:
            hint = "lower --n-mels or raise --n-fft"
            hint += " (or widen --f-min/--f-max)" if p.f_min > 0 or p.f_max is not None else ""
        # Every file at this rate has the empty rows (each manifest row says so); stderr names one.
        notice.file_warning(
            items,
            f"{empty.count} of the {p.n_mels} mel filters {'is' if empty.count == 1 else 'are'} empty "
            f"(all zero) at {target} Hz: "
            f"{p.n_fft // 2 + 1} frequency bins (n_fft {p.n_fft}) are too few for {p.n_mels} mels "
            f"between {empty.f_min:g} and {empty.f_max:g} Hz, and those mels' rows of the output are 0; "
            f"{hint} (said once for all files at {target} Hz)",
            named=items[:1],
            key=("empty mel filters", target),
        )
    mel_np = host_mel.numpy()
    if not np.isfinite(mel_np).all():
        # Samples loud enough that their power passes float32's range (~1e17 for n_fft 400: a float WAV
        # or .npy may hold them) gave NaN features written as a success. The batch is redone file by
        # file, so only such a file fails.
        peak = max(float(np.abs(it.float32()).max()) for it in items)
        raise nio.InputFileError(
            f"the mel features are not finite (their power overflows float32): samples up to {peak:.3g} "
            "in magnitude, where audio is at most 1; scale the input down"
        )
    if p.whisper:
        frames = [mel_np.shape[-1]] * len(items)
    out, r = [], 0
    for it, n in zip(items, frames, strict=True):
        c = it.data.shape[0]
        # A view: the writer thread's np.save does the copy out of the batch, off the main thread.
        out.append(mel_np[r : r + c, :, :n])
        r += c
    return out


@dataclass(frozen=True)
class EmptyFilters:
    """Mel filters the library leaves empty (all zero) for some parameters and rate."""

    count: int
    f_min: float
    f_max: float
    #: The library's warning about them (raised when it builds the bank).
    library_text: str


@functools.lru_cache(maxsize=64)
def empty_mel_filters(
    n_fft: int, n_mels: int, f_min: float, f_max: float | None, rate: int
) -> EmptyFilters | None:
    """Whether nbxsig.features warns that some mel filters are empty at ``rate`` (the CLI's HTK scale,
    no norm) -- the library decides, as torchaudio does -- and how many are. The bank is built anew
    here: the library caches its own and warns only the first time it builds it, which in a run may
    be the device warm-up's, or an earlier run's in the same process."""
    import torch

    import nbxsig.features as nf

    f_min, f_max = nf.check_band(f_min, f_max, rate)  # f_max None: the library's default, rate // 2
    with caught_warnings() as texts:
        bank = nf.mel_filterbank(n_fft // 2 + 1, f_min, f_max, n_mels, rate, dtype=torch.float64)
    if not texts:
        return None
    count = int((bank.amax(dim=0) == 0).sum())
    return EmptyFilters(count, f_min, f_max, texts[0])


def _mel(x: Any, p: MelParams, target: int) -> Any:
    """The batch's (log-)mel on its device (``x``: the reflect-padded, stacked signals)."""
    import nbxsig.features

    if p.whisper:
        return nbxsig.features.whisper_log_mel(x, n_mels=p.n_mels)
    fn = nbxsig.features.log_mel_spectrogram if p.log else nbxsig.features.mel_spectrogram
    return fn(
        x,
        sample_rate=target,
        n_fft=p.n_fft,
        hop_length=p.hop_length,
        f_min=p.f_min,
        f_max=p.f_max,
        n_mels=p.n_mels,
        # None: the library's cached periodic Hann (the CLI's window), so the kernel's packed DFT
        # basis is reused across batches instead of rebuilt for a fresh window tensor.
        window=None,
        center=False,
    )


#: Triton specialises integer arguments on divisibility by 16: a batch width and frame count that are
#: multiples of 16 give every batch the same compiled mel kernel (files of any length), where raw
#: lengths would compile up to 8 variants (length, frames, strides × divisible or not), ~1 s each.
_ALIGN = 16


def _aligned_width(width: int, p: MelParams) -> int:
    """The smallest batch width >= ``width`` (samples, after centre padding) giving a frame count that
    is a multiple of 16, itself rounded up to a multiple of 16. The extra columns are zeros past every
    file's own padded end: no kept frame reads them."""
    frames = 1 + max(0, width - p.n_fft) // p.hop_length
    frames = -(-frames // _ALIGN) * _ALIGN
    aligned = max(width, p.n_fft + (frames - 1) * p.hop_length)
    return -(-aligned // _ALIGN) * _ALIGN


def mel_key(a: nio.Audio, p: MelParams) -> Any:
    return (a.sample_rate, a.data.dtype.str, a.samples if p.whisper else None)


def mel_save(item: nio.Audio, mel: np.ndarray, output: Path) -> None:
    # The copy out of the batch happens here, in a writer thread; it also keeps np.save on its fast
    # path (a non-contiguous array is written chunk by chunk, ~5x slower).
    nio.write_npy(output, np.ascontiguousarray(mel))


@click.command()
@click.argument("inputs", nargs=-1, required=True, metavar="INPUT...")
@click.option(
    "--sample-rate",
    type=click.IntRange(min=1),
    help=f"Compute at this rate (Hz), resampling audio at other rates; .npy waveforms are taken to be "
    f"at this rate. Default: each file's own rate, {DEFAULT_ARRAY_RATE} for .npy waveforms.",
)
@click.option("--n-fft", type=click.IntRange(min=2), default=400, show_default=True)
@click.option("--hop-length", type=click.IntRange(min=1), default=160, show_default=True)
@click.option("--n-mels", type=click.IntRange(min=1), default=80, show_default=True)
@click.option("--f-min", type=FiniteFloat(min=0), default=0.0, show_default=True, help="Hz.")
@click.option(
    "--f-max", type=FiniteFloat(min=0, min_open=True), help="Hz. Default: sample_rate // 2 (torchaudio's)."
)
@click.option("--log", is_flag=True, help="log10 of the mel power (floored at 1e-10).")
@click.option(
    "--whisper", is_flag=True, help="The Whisper front end (16 kHz, n_fft 400, hop 160, 80 or 128 mels)."
)
@batch_options
def mel(
    inputs: tuple[str, ...],
    sample_rate: int | None,
    n_fft: int,
    hop_length: int,
    n_mels: int,
    f_min: float,
    f_max: float | None,
    log: bool,
    whisper: bool,
    opts: BatchOptions,
) -> None:
    """Mel spectrograms of audio files (or .npy waveforms) into float32 .npy files of shape
    (channels, n_mels, frames): power, or log10 with --log, or Whisper's log-mel with --whisper."""
    if whisper and n_mels not in (80, 128):
        raise click.BadParameter(f"--whisper takes 80 or 128 mels, got {n_mels}", param_hint="--n-mels")
    if whisper:
        # Whisper's front end fixes these: taking them silently would compute something else.
        ctx = click.get_current_context()
        fixed = ("sample_rate", "n_fft", "hop_length", "f_min", "f_max", "log")
        given = [f"--{name.replace('_', '-')}" for name in fixed if _given(ctx, name)]
        if given:
            raise click.UsageError(
                f"--whisper fixes the rate (16 kHz), n_fft, hop, band and log scale; drop {', '.join(given)}"
            )
    # A frequency bin lies inside at most two triangular filters, so past 2 · (n_fft // 2 + 1) mels some
    # are always empty (a warning, as the library's, below that); a count like 10^9 built a filter bank
    # of terabytes and the process was killed.
    bins = n_fft // 2 + 1
    if not whisper and n_mels > 2 * bins:
        raise click.BadParameter(
            f"at most {2 * bins} mels at --n-fft {n_fft} (each of its {bins} frequency bins lies in at most "
            f"two filters), got {n_mels}",
            param_hint="--n-mels",
        )
    # Stricter than the library (which, as torchaudio, refuses only f_min > f_max): an empty band gives
    # all-zero (torchaudio: NaN) features, which a batch run should refuse before writing any.
    if f_max is not None and f_min >= f_max:
        raise click.BadParameter(f"must be below --f-max ({f_max} Hz), got {f_min} Hz", param_hint="--f-min")
    # With or without --f-max: a band above the Nyquist frequency holds no bin either (--f-max past it
    # is allowed, as torchaudio allows it, but does not widen it). The same bound, rate // 2, as each
    # file's check in mel_process (an odd rate's f_min between the two was refused once per file).
    if sample_rate is not None and f_min >= sample_rate // 2:
        raise click.BadParameter(
            f"must be below the Nyquist frequency of {sample_rate} Hz audio ({sample_rate // 2} Hz), "
            f"got {f_min:g} Hz",
            param_hint="--f-min",
        )
    p = MelParams(sample_rate, n_fft, hop_length, n_mels, f_min, f_max, log, whisper)
    device = resolve_device(opts)
    # The CUDA context and the kernels' modules while the inputs are found and planned.
    started = batch.start_device(device, modules=MEL_MODULES)
    clock = batch.DeviceClock()
    job = batch.Job(
        # PCM_16 stays int16 until it is on the device: half the bytes from the decode workers.
        load=functools.partial(read_signal, default_rate=sample_rate or DEFAULT_ARRAY_RATE, pcm16=True),
        process=functools.partial(mel_process, p=p, device=device, notice=Notice(), clock=clock),
        save=mel_save,
        group_key=functools.partial(mel_key, p=p),
        length=lambda a: a.samples,
        # CUDA context + kernel compilation/autotuning while the first files decode.
        warm_up=device.type == "cuda",
        clock=clock,
    )
    execute(
        inputs,
        opts,
        job,
        extensions=(*nio.AUDIO_EXTENSIONS, ".npy"),
        suffix=lambda path: ".npy",
        output_extensions=(".npy",),
        started=started,
    )


def _given(ctx: click.Context, name: str) -> bool:
    """Whether the command line (or an environment variable) set option ``name``, not its default."""
    source = ctx.get_parameter_source(name)
    return source is not None and source not in (ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)
