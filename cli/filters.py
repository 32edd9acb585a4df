"""``nbxsig filter`` and ``nbxsig resample``."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import numpy as np

from nbxsig import batch
from nbxsig import io as nio

from ._common import (
    BatchOptions,
    FiniteFloat,
    Notice,
    Signal,
    batch_options,
    caught_warnings,
    execute,
    keep_subtype,
    read_signal,
    resolve_device,
)


@dataclass
class Image:
    """A decoded image (C, H, W) in [0, 1], and the warnings about it, for its manifest row: decoding's
    (e.g. PIL's DecompressionBombWarning), said by the main process as the CLI's own lines, then
    processing's (:meth:`Notice.file_warning`)."""

    data: np.ndarray
    sample_rate: None = None
    samples: None = None
    path: str = ""
    warnings: list[str] = field(default_factory=list)


def load_signal(path: Path, *, array_rate: int | None) -> Signal:
    """Audio or a .npy waveform (at ``array_rate``, which must be given)."""
    if nio.kind_of(path) == "array" and array_rate is None:
        nio._check_readable(path)
        raise nio.InputFileError(f"{path}: a .npy waveform carries no sample rate; give --sample-rate")
    return read_signal(path, default_rate=array_rate or 1)


def load_image(path: Path) -> Image:
    """An image, with PIL's warnings about it kept for the main process (this may run in a decode
    worker, whose stderr would show them raw); PIL's refusal of a too large one fails the file."""
    from PIL.Image import DecompressionBombError

    try:
        with caught_warnings() as texts:
            data = nio.read_image(path)
    except DecompressionBombError as exc:
        raise nio.InputFileError(f"{path}: cannot decode as an image ({exc})") from None
    return Image(data, path=str(path), warnings=texts)


def load_signal_or_image(path: Path, *, array_rate: int | None) -> Signal | Image:
    """Audio, a .npy waveform (at ``array_rate``, which must be given) or an image."""
    if nio.kind_of(path) == "image":
        return load_image(path)
    return load_signal(path, array_rate=array_rate)


def save_like_input(item: nio.Audio | Image, data: np.ndarray, output: Path) -> None:
    """Write in the output's format: audio keeps the input's subtype where the format allows it."""
    kind = nio.kind_of(output)
    if isinstance(item, Image):
        nio.write_image(output, data)
    elif kind == "audio":
        nio.write_audio(output, data, item.sample_rate, subtype=keep_subtype(output, item.subtype))
    else:
        nio.write_npy(output, data)


def _split(y: Any, items: list[Any], lengths: list[int]) -> list[np.ndarray]:
    import torch

    y = y.to(torch.float32).cpu().numpy()
    out, r = [], 0
    for it, n in zip(items, lengths, strict=True):
        c = it.data.shape[0]
        out.append(np.ascontiguousarray(y[r : r + c, :n]))
        r += c
    return out


# --------------------------------------------------------------------------------------------
# filter


@dataclass(frozen=True)
class FilterSpec:
    lowpass: float | None
    highpass: float | None
    bandpass: tuple[float, float] | None
    taps_file: str | None
    numtaps: int
    gaussian: float | None
    box: int | None
    sobel: bool
    unsharp: float | None

    @property
    def audio(self) -> bool:
        return any(v is not None for v in (self.lowpass, self.highpass, self.bandpass, self.taps_file))


def _gauss_size(sigma: float) -> int:
    return 2 * math.ceil(3.0 * sigma) + 1


def design(spec: FilterSpec, rate: float) -> Any:
    """The FIR taps ``--lowpass``/``--highpass``/``--bandpass`` ask for at ``rate`` (float64)."""
    import nbxsig.filters as nf

    if spec.lowpass is not None:
        return nf.lowpass_taps(spec.lowpass, fs=rate, numtaps=spec.numtaps)
    if spec.highpass is not None:
        return nf.highpass_taps(spec.highpass, fs=rate, numtaps=spec.numtaps)
    assert spec.bandpass is not None
    return nf.bandpass_taps(*spec.bandpass, fs=rate, numtaps=spec.numtaps)


def _check_design(spec: FilterSpec) -> None:
    """Design the filter once at a rate where its cut-offs fit (four times the highest): what the
    library refuses there -- an even --numtaps for a highpass -- it refuses at every rate, so it is
    a usage error, not one failure per file. (A cut-off at or above a file's Nyquist frequency
    still fails that file.)"""
    from nbxsig.errors import ParameterValueError

    edges = [spec.lowpass, spec.highpass, *(spec.bandpass or ())]
    try:
        design(spec, 4.0 * max(e for e in edges if e is not None))
    except ParameterValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--numtaps") from None


def filter_process(
    items: list[Any], *, spec: FilterSpec, taps: Any, device: Any, notice: Notice
) -> list[np.ndarray]:
    """Audio: one linear-phase FIR over the batch (zero-padded to the longest; zeros are also the
    boundary, so padding changes nothing), its (numtaps-1)/2 delay removed. Images: the kornia-style
    filter over a stack of equally sized images."""
    import torch

    import nbxsig.filters as nf

    if isinstance(items[0], Image):
        if spec.audio:
            raise nio.InputFileError("--lowpass/--highpass/--bandpass/--taps filter audio, not images")
        x = torch.from_numpy(np.stack([it.data for it in items])).to(device)
        if spec.gaussian is not None:
            k = _gauss_size(spec.gaussian)
            y = nf.gaussian_blur2d(x, (k, k), (spec.gaussian, spec.gaussian))
        elif spec.box is not None:
            y = nf.box_blur(x, (spec.box, spec.box))
        elif spec.sobel:
            y = nf.sobel(x)
        else:
            k = _gauss_size(spec.unsharp)
            y = nf.unsharp_mask(x, (k, k), (spec.unsharp, spec.unsharp))
        for it in items:  # decoding's warnings, once the image is filtered (a failure says its own)
            for text in it.warnings:
                notice.warning(it.path, text, key=(it.path, text))
        return [a for a in y.cpu().numpy()]
    if not spec.audio:
        raise nio.InputFileError("--gaussian/--box/--sobel/--unsharp filter images, not audio")
    h = design(spec, items[0].sample_rate) if taps is None else taps
    h = h.to(device=device, dtype=torch.float32)
    stacked, _ = batch.pad_stack([torch.from_numpy(it.data).to(device) for it in items])
    # "same" correlation with the reversed taps = the convolution advanced by (K-1)//2 samples.
    y = nf.depthwise_conv1d(stacked[:, None, :], h.flip(-1)[None], padding="same")[:, 0]
    return _split(y, items, [it.samples for it in items])


def _filter_key(item: Any) -> Any:
    return ("image", item.data.shape) if isinstance(item, Image) else ("audio", item.sample_rate)


def _load_taps(path: str) -> Any:
    import torch

    try:
        arr = nio.read_array(path)
        if not isinstance(arr, np.ndarray) or arr.ndim != 1 or not np.issubdtype(arr.dtype, np.floating):
            raise nio.InputFileError(f"{path} must hold a 1-D float array of taps")
        if arr.size == 0:
            raise nio.InputFileError(f"{path} holds no taps")
        nio.check_finite(path, arr)
    except nio.InputFileError as exc:
        raise click.BadParameter(str(exc), param_hint="--taps") from None
    return torch.from_numpy(arr.astype(np.float64))


@click.command(name="filter")
@click.argument("inputs", nargs=-1, required=True, metavar="INPUT...")
@click.option("--lowpass", type=FiniteFloat(min=0, min_open=True), metavar="HZ", help="Audio: lowpass.")
@click.option("--highpass", type=FiniteFloat(min=0, min_open=True), metavar="HZ", help="Audio: highpass.")
@click.option(
    "--bandpass", type=(FiniteFloat(), FiniteFloat()), metavar="LO HI", help="Audio: bandpass (Hz)."
)
@click.option("--taps", "taps_file", metavar="FILE.npy", help="Audio: FIR taps (1-D .npy), centred.")
@click.option(
    "--numtaps",
    type=click.IntRange(min=3),
    default=101,
    show_default=True,
    help="Length of the designed FIR (odd for highpass).",
)
@click.option("--gaussian", type=FiniteFloat(min=0, min_open=True), metavar="SIGMA", help="Image blur.")
@click.option("--box", type=click.IntRange(min=1), metavar="K", help="Image: K×K box blur.")
@click.option("--sobel", is_flag=True, help="Image: Sobel gradient magnitude.")
@click.option("--unsharp", type=FiniteFloat(min=0, min_open=True), metavar="SIGMA", help="Image sharpening.")
@click.option(
    "--sample-rate", type=click.IntRange(min=1), help="Rate (Hz) of .npy waveforms (required for them)."
)
@batch_options
def filter_(
    inputs: tuple[str, ...],
    lowpass: float | None,
    highpass: float | None,
    bandpass: tuple[float, float] | None,
    taps_file: str | None,
    numtaps: int,
    gaussian: float | None,
    box: int | None,
    sobel: bool,
    unsharp: float | None,
    sample_rate: int | None,
    opts: BatchOptions,
) -> None:
    """Filter audio with a linear-phase FIR (its delay removed, zeros beyond the ends) or images
    with kornia-style filters. Outputs keep the input's type and, for audio, its subtype."""
    chosen = [
        name
        for name, v in (
            ("--lowpass", lowpass),
            ("--highpass", highpass),
            ("--bandpass", bandpass),
            ("--taps", taps_file),
            ("--gaussian", gaussian),
            ("--box", box),
            ("--unsharp", unsharp),
        )
        if v is not None
    ] + (["--sobel"] if sobel else [])
    if len(chosen) != 1:
        raise click.UsageError(
            "give exactly one of --lowpass, --highpass, --bandpass, --taps (audio) or --gaussian, --box, "
            f"--sobel, --unsharp (images); got {', '.join(chosen) or 'none'}"
        )
    if bandpass is not None and not 0 < bandpass[0] < bandpass[1]:
        raise click.BadParameter(f"must be 0 < LO < HI, got {bandpass}", param_hint="--bandpass")
    spec = FilterSpec(lowpass, highpass, bandpass, taps_file, numtaps, gaussian, box, sobel, unsharp)
    if spec.audio and taps_file is None:
        _check_design(spec)
    taps = _load_taps(taps_file) if taps_file else None
    device = resolve_device(opts)
    job = batch.Job(
        load=functools.partial(load_signal_or_image, array_rate=sample_rate),
        process=functools.partial(filter_process, spec=spec, taps=taps, device=device, notice=Notice()),
        save=save_like_input,
        group_key=_filter_key,
        length=lambda it: it.data.shape[-1],
    )
    extensions = (*nio.AUDIO_EXTENSIONS, ".npy") if spec.audio else nio.IMAGE_EXTENSIONS
    execute(
        inputs,
        opts,
        job,
        extensions=extensions,
        suffix=lambda path: path.suffix,
        output_extensions=extensions,
        protect=[taps_file] if taps_file else [],
    )


# --------------------------------------------------------------------------------------------
# resample


def resample_process(items: list[nio.Audio], *, rate: int, device: Any) -> list[np.ndarray]:
    """torchaudio-style sinc resampling of a batch zero-padded to the longest (the resampler pads
    with zeros itself, so the padding changes nothing), cut to each file's ceil(L·new/orig)."""
    import torch

    import nbxsig.filters as nf

    orig = items[0].sample_rate
    stacked, _ = batch.pad_stack([torch.from_numpy(it.data).to(device) for it in items])
    y = nf.resample(stacked, orig, rate)
    lengths = [-(-it.samples * rate // orig) for it in items]
    return _split(y, items, lengths)


def resample_save(item: nio.Audio, data: np.ndarray, output: Path, *, rate: int) -> None:
    if nio.kind_of(output) == "audio":
        nio.write_audio(output, data, rate, subtype=keep_subtype(output, item.subtype))
    else:
        nio.write_npy(output, data)


@click.command()
@click.argument("inputs", nargs=-1, required=True, metavar="INPUT...")
@click.option("--rate", type=click.IntRange(min=1), required=True, help="New sample rate (Hz).")
@click.option(
    "--sample-rate", type=click.IntRange(min=1), help="Rate (Hz) of .npy waveforms (required for them)."
)
@batch_options
def resample(inputs: tuple[str, ...], rate: int, sample_rate: int | None, opts: BatchOptions) -> None:
    """Resample audio (or .npy waveforms) to --rate with a band-limited sinc (torchaudio's
    resample). Outputs keep the input's format and subtype; -o is required. Not images."""
    if opts.output is None:
        raise click.UsageError(
            "resample writes files of the input's type: name an output file or folder with -o"
        )
    device = resolve_device(opts)
    job = batch.Job(
        load=functools.partial(load_signal, array_rate=sample_rate),
        process=functools.partial(resample_process, rate=rate, device=device),
        save=functools.partial(resample_save, rate=rate),
        group_key=lambda it: it.sample_rate,
        length=lambda it: it.data.shape[-1],
    )
    extensions = (*nio.AUDIO_EXTENSIONS, ".npy")
    execute(
        inputs,
        opts,
        job,
        extensions=extensions,
        suffix=lambda path: path.suffix,
        output_extensions=extensions,
    )
