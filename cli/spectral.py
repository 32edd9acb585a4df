"""``nbxsig stft`` and ``nbxsig istft``."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import numpy as np

from nbxsig import batch
from nbxsig import io as nio

from ._common import (
    WINDOWS,
    BatchOptions,
    Notice,
    batch_options,
    execute,
    make_window,
    read_signal,
    resolve_device,
)

#: The iSTFT-head (Kokoro/iSTFTNet) rate, assumed for arrays that carry no sample rate.
DEFAULT_ARRAY_RATE = 24000


# --------------------------------------------------------------------------------------------
# stft


@dataclass(frozen=True)
class StftParams:
    n_fft: int
    hop_length: int
    win_length: int
    window: str
    center: bool
    pad_mode: str
    normalized: bool


def frames_of(length: int, p: StftParams) -> int:
    """Frames torch.stft gives for ``length`` samples."""
    padded = length + 2 * (p.n_fft // 2) if p.center else length
    return 1 + (padded - p.n_fft) // p.hop_length if padded >= p.n_fft else 0


def _check_length(samples: int, p: StftParams) -> None:
    """Refuse a signal torch.stft refuses: shorter than a frame, or than its centre padding needs
    (reflect: more than n_fft // 2 samples; circular: at least that many, one wrap) -- the batch's own
    padding would otherwise fail with its words, or wrap a short signal more than once."""
    half = p.n_fft // 2
    needs = {"reflect": half + 1, "circular": half}.get(p.pad_mode, 0) if p.center else 0
    if samples < needs:
        raise nio.InputFileError(
            f"{samples} samples are too few for n_fft {p.n_fft} with --pad-mode {p.pad_mode}: centre "
            f"padding by n_fft // 2 = {half} needs {'more than' if p.pad_mode == 'reflect' else 'at least'} "
            f"{half}"
        )
    if frames_of(samples, p) < 1:
        bare = "" if p.center else " without centre padding (--no-center)"
        raise nio.InputFileError(f"{samples} samples are too few for n_fft {p.n_fft}{bare}")


def stft_process(items: list[nio.Audio], *, p: StftParams, device: Any, notice: Notice) -> list[np.ndarray]:
    """One batched nbxsig.stft.stft call for files of similar length, equal to per-file calls: each
    file is centre-padded on its own (so its edges see its own samples, as torch.stft does), the
    batch is zero-padded to the longest and transformed with center=False, and each file's frames
    are cut back to its own count."""
    import torch

    import nbxsig.stft

    for it in items:
        if it.rate_assumed:
            notice(f"arrays carry no sample rate; assuming {it.sample_rate} Hz (--sample-rate)")
        _check_length(it.samples, p)
    pad = p.n_fft // 2 if p.center else 0
    stack, rows = batch.stack_padded([it.data for it in items], pad=pad, mode=p.pad_mode)
    stacked = batch.to_device_float(stack, device)
    window = make_window(p.window, p.win_length, device=device)
    spec = nbxsig.stft.stft(
        stacked,
        p.n_fft,
        hop_length=p.hop_length,
        win_length=p.win_length,
        window=window,
        center=False,
        normalized=p.normalized,
        return_complex=True,
    )
    out, r = [], 0
    for it, n in zip(items, rows, strict=True):
        out.append(spec[r : r + n, :, : frames_of(it.samples, p)].to(torch.complex64).cpu().numpy())
        r += n
    return out


def stft_save(item: nio.Audio, spec: np.ndarray, output: Path, *, p: StftParams) -> None:
    nio.write_npz(
        output,
        {
            "spec": spec,
            "sample_rate": np.int64(item.sample_rate),
            "n_fft": np.int64(p.n_fft),
            "hop_length": np.int64(p.hop_length),
            "win_length": np.int64(p.win_length),
            "window": np.str_(p.window),
            "center": np.bool_(p.center),
            "pad_mode": np.str_(p.pad_mode),
            "normalized": np.bool_(p.normalized),
            "length": np.int64(item.samples),
        },
    )


@click.command()
@click.argument("inputs", nargs=-1, required=True, metavar="INPUT...")
@click.option("--n-fft", type=click.IntRange(min=1), required=True, help="FFT size (samples).")
@click.option("--hop-length", type=click.IntRange(min=1), help="Hop (samples). Default: n_fft // 4.")
@click.option("--win-length", type=click.IntRange(min=1), help="Window length ≤ n_fft. Default: n_fft.")
@click.option(
    "--window", type=click.Choice(WINDOWS), default="hann", show_default=True, help="Periodic window."
)
@click.option(
    "--center/--no-center", default=True, show_default=True, help="Pad by n_fft // 2 on both sides."
)
@click.option(
    "--pad-mode",
    type=click.Choice(["reflect", "constant", "replicate", "circular"]),
    default="reflect",
    show_default=True,
)
@click.option("--normalized", is_flag=True, help="Scale by n_fft ** -0.5.")
@click.option(
    "--sample-rate",
    type=click.IntRange(min=1),
    default=DEFAULT_ARRAY_RATE,
    show_default=True,
    help="Rate (Hz) recorded for .npy inputs, which carry none.",
)
@batch_options
def stft(
    inputs: tuple[str, ...],
    n_fft: int,
    hop_length: int | None,
    win_length: int | None,
    window: str,
    center: bool,
    pad_mode: str,
    normalized: bool,
    sample_rate: int,
    opts: BatchOptions,
) -> None:
    """Short-time Fourier transform of audio files (or .npy waveforms) into .npz files holding
    spec (complex64, (channels, n_fft//2+1, frames)) and the parameters, which istft reads back."""
    from nbxsig.errors import ParameterValueError
    from nbxsig.streaming import default_hop_length

    win_length = n_fft if win_length is None else win_length
    if win_length > n_fft:
        raise click.BadParameter(f"must be ≤ --n-fft ({n_fft}), got {win_length}", param_hint="--win-length")
    if hop_length is None:
        try:  # torch's default, as the library takes it (n_fft // 4: none below n_fft 4)
            hop_length = default_hop_length(n_fft)
        except ParameterValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--hop-length") from None
    p = StftParams(n_fft, hop_length, win_length, window, center, pad_mode, normalized)
    device = resolve_device(opts)
    job = batch.Job(
        load=functools.partial(read_signal, default_rate=sample_rate),
        process=functools.partial(stft_process, p=p, device=device, notice=Notice()),
        save=functools.partial(stft_save, p=p),
        length=lambda a: a.samples,
    )
    execute(
        inputs,
        opts,
        job,
        extensions=(*nio.AUDIO_EXTENSIONS, ".npy"),
        suffix=lambda path: ".npz",
        output_extensions=(".npz",),
    )


# --------------------------------------------------------------------------------------------
# istft


@dataclass
class Spectrum:
    """A decoded istft input: the complex spectrum (C, F, T), the shape of its leading dimensions
    and whatever parameters the file carried."""

    spec: np.ndarray
    lead_shape: tuple[int, ...]
    stored: dict[str, Any]
    sample_rate: int | None = None
    samples: int | None = None
    path: str = ""
    #: What the CLI warned about it (:meth:`Notice.file_warning`), for its manifest row.
    warnings: list[str] = field(default_factory=list)


def load_spectrum(path: Path) -> Spectrum:
    """An .npz from ``nbxsig stft``, a complex .npy (..., F, T) or a real .npy (..., F, T, 2)."""
    loaded = nio.read_array(path)
    stored: dict[str, Any] = {}
    if isinstance(loaded, dict):
        if "spec" not in loaded:
            raise nio.InputFileError(
                f"{path}: an .npz input needs a 'spec' array (as written by nbxsig stft)"
            )
        arr = loaded["spec"]
        stored = stored_params(loaded)
    else:
        arr = loaded
    if np.iscomplexobj(arr):
        if arr.ndim < 2:
            raise nio.InputFileError(f"{path}: a complex spectrum must be (..., F, T), got shape {arr.shape}")
    elif np.issubdtype(arr.dtype, np.floating):
        if arr.ndim < 3 or arr.shape[-1] != 2:
            raise nio.InputFileError(
                f"{path}: a real spectrum must be (..., F, T, 2) (real, imaginary), got shape {arr.shape}"
            )
        arr = arr[..., 0] + 1j * arr[..., 1]
    else:
        raise nio.InputFileError(
            f"{path}: a spectrum must be complex or real floating, got dtype {arr.dtype}"
        )
    if arr.size == 0:
        raise nio.InputFileError(f"{path}: the spectrum is empty (shape {arr.shape})")
    nio.check_finite(path, arr)
    lead = arr.shape[:-2]
    spec = np.ascontiguousarray(arr.reshape(-1, *arr.shape[-2:]).astype(np.complex64))
    return Spectrum(spec, tuple(lead), stored, path=str(path))


@dataclass(frozen=True)
class IstftFlags:
    n_fft: int | None
    hop_length: int | None
    win_length: int | None
    window: str | None
    center: bool | None
    normalized: bool | None
    length: int | None
    sample_rate: int | None


def istft_params(s: Spectrum, flags: IstftFlags, notice: Notice) -> dict[str, Any]:
    """Each parameter from the flag, else from the file, else the default (stated on stderr where
    it is a guess).

    Raises:
        InputFileError: a parameter the file carries has the wrong type or range (named by its key),
        or the parameters do not fit the spectrum (bins, frames).
    """
    from nbxsig.errors import ParameterValueError
    from nbxsig.streaming import default_hop_length

    stored = s.stored
    n_bins, n_frames = s.spec.shape[-2:]
    n_fft = flags.n_fft or stored_param(stored, "n_fft", int)
    if n_fft is None:
        n_fft = 2 * (n_bins - 1)
        notice(f"no --n-fft given; assuming n_fft = 2 * (bins - 1) = {n_fft}")
    hop = flags.hop_length or stored_param(stored, "hop_length", int)
    win = flags.win_length or stored_param(stored, "win_length", int) or n_fft
    window = flags.window or stored_param(stored, "window", str) or "hann"
    center = flags.center if flags.center is not None else stored_param(stored, "center", bool)
    center = True if center is None else center
    normalized = (
        flags.normalized if flags.normalized is not None else stored_param(stored, "normalized", bool)
    )
    length = flags.length or stored_param(stored, "length", int)
    rate = flags.sample_rate or stored_param(stored, "sample_rate", int)
    if rate is None:
        rate = DEFAULT_ARRAY_RATE
        notice(f"no sample rate given; writing {rate} Hz (--sample-rate)")
    if window not in WINDOWS:
        raise nio.InputFileError(f"window {window!r} is not one of {', '.join(WINDOWS)}")
    if n_fft < 1 or n_bins not in (n_fft // 2 + 1, n_fft):  # one bin and no n_fft given guesses 0
        raise nio.InputFileError(
            f"n_fft {n_fft} does not fit a spectrum of {n_bins} bins (n_fft // 2 + 1, or n_fft two-sided)"
        )
    if hop is None:
        try:  # torch's default, as the library takes it (n_fft // 4: none below n_fft 4)
            hop = default_hop_length(n_fft)
        except ParameterValueError as exc:
            raise nio.InputFileError(f"{exc} (--hop-length)") from None
    if win > n_fft:
        raise nio.InputFileError(f"win_length {win} exceeds n_fft {n_fft}")
    # Overlap-add of T frames, less the centre padding: none left means nothing to write (torch
    # itself refuses it).
    samples = n_fft + hop * (n_frames - 1) - (2 * (n_fft // 2) if center else 0)
    if length is None and samples < 1:
        raise nio.InputFileError(
            f"{n_frames} frame(s) give no samples (n_fft {n_fft}, hop {hop}, center {center})"
        )
    return dict(
        n_fft=n_fft,
        hop_length=hop,
        win_length=win,
        window=window,
        center=center,
        normalized=bool(normalized),
        length=length,
        sample_rate=rate,
    )


#: What each kind of stored parameter must be.
_KINDS = {int: "a positive integer", str: "a string", bool: "a boolean"}
#: The parameters an .npz from ``nbxsig stft`` carries that istft or plot read, by kind.
_PARAMS = {
    "sample_rate": int,
    "n_fft": int,
    "hop_length": int,
    "win_length": int,
    "length": int,
    "window": str,
    "center": bool,
    "normalized": bool,
}


def stored_params(loaded: dict[str, np.ndarray], read: tuple[str, ...] = tuple(_PARAMS)) -> dict[str, Any]:
    """The single values (0-d arrays) of an .npz besides its ``spec``, as Python values. A parameter
    of ``read`` that holds an array instead fails the file naming the key: left out, it was taken as
    missing and the default used without a word (an edited ``window`` array, a ``n_fft`` list)."""
    for key in read:
        value, kind = loaded.get(key), _PARAMS[key]
        if value is not None and value.ndim != 0:
            raise nio.InputFileError(
                f"the .npz's {key} must be {_KINDS[kind]}, got an array of shape {value.shape}"
            )
    return {k: v.item() for k, v in loaded.items() if k != "spec" and v.ndim == 0}


def stored_param(stored: dict[str, Any], key: str, kind: type) -> Any:
    """The parameter ``key`` of an .npz (None when it has none), checked: another tool's file, or an
    edited one, must not reach torch or soundfile as a 0 rate or a string n_fft."""
    if key not in stored:
        return None
    value = stored[key]
    if kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    else:
        ok = isinstance(value, kind)
    if not ok:
        raise nio.InputFileError(f"the .npz's {key} must be {_KINDS[kind]}, got {value!r}")
    return value


def istft_process(
    items: list[Spectrum], *, flags: IstftFlags, device: Any, notice: Notice
) -> list[np.ndarray]:
    """One nbxsig.stft.istft call for spectra of equal shape and parameters (the group key), which
    is exactly the per-file result (no padding: overlap-add would see the padding frames)."""
    import torch

    import nbxsig.stft

    params = [istft_params(it, flags, notice) for it in items]
    p = params[0]
    spec = torch.from_numpy(np.concatenate([it.spec for it in items])).to(device)
    window = make_window(p["window"], p["win_length"], device=device)
    wave = nbxsig.stft.istft(
        spec,
        p["n_fft"],
        hop_length=p["hop_length"],
        win_length=p["win_length"],
        window=window,
        center=p["center"],
        normalized=p["normalized"],
        length=p["length"],
    )
    wave = wave.to(torch.float32).cpu().numpy()
    out, r = [], 0
    for it, q in zip(items, params, strict=True):
        n = it.spec.shape[0]
        it.sample_rate, it.samples = q["sample_rate"], int(wave.shape[-1])
        out.append(wave[r : r + n])
        r += n
    return out


def istft_key(s: Spectrum, flags: IstftFlags) -> Any:
    return (s.spec.shape[1:], tuple(sorted(s.stored.items())))


def istft_save(item: Spectrum, wave: np.ndarray, output: Path, *, subtype: str | None) -> None:
    if output.suffix.lower() == ".npy":
        nio.write_npy(output, wave.reshape(*item.lead_shape, wave.shape[-1]))
    else:
        assert item.sample_rate is not None
        if subtype is None:  # FLOAT keeps the reconstruction as is, where the format holds it
            subtype = "FLOAT" if nio.can_write_audio(output.suffix, "FLOAT") else None
        nio.write_audio(output, wave, item.sample_rate, subtype=subtype)


@click.command()
@click.argument("inputs", nargs=-1, required=True, metavar="INPUT...")
@click.option(
    "--n-fft", type=click.IntRange(min=1), help="FFT size. Default: the .npz's, else 2 * (bins - 1)."
)
@click.option("--hop-length", type=click.IntRange(min=1), help="Hop. Default: the .npz's, else n_fft // 4.")
@click.option(
    "--win-length", type=click.IntRange(min=1), help="Window length. Default: the .npz's, else n_fft."
)
@click.option("--window", type=click.Choice(WINDOWS), help="Periodic window. Default: the .npz's, else hann.")
@click.option("--center/--no-center", default=None, help="Default: the .npz's, else --center.")
@click.option("--normalized/--no-normalized", default=None, help="Default: the .npz's, else not normalized.")
@click.option(
    "--length", type=click.IntRange(min=1), help="Output samples. Default: the .npz's, else torch's."
)
@click.option(
    "--sample-rate",
    type=click.IntRange(min=1),
    help=f"Rate (Hz) of the audio written. Default: the .npz's, else {DEFAULT_ARRAY_RATE} (stated).",
)
@click.option(
    "--subtype",
    type=click.Choice(["FLOAT", "PCM_16", "PCM_24"], case_sensitive=False),
    help="Audio sample format. Default: FLOAT, or the format's default where it holds no FLOAT (FLAC, OGG).",
)
@batch_options
def istft(
    inputs: tuple[str, ...],
    n_fft: int | None,
    hop_length: int | None,
    win_length: int | None,
    window: str | None,
    center: bool | None,
    normalized: bool | None,
    length: int | None,
    sample_rate: int | None,
    subtype: str | None,
    opts: BatchOptions,
) -> None:
    """Inverse STFT of an .npz from `nbxsig stft` (no flags needed), a complex .npy (..., F, T) or a
    real .npy (..., F, T, 2), into .wav (FLOAT) — NAME.istft.wav beside the input, not NAME.wav, which
    is often the audio the spectrum came from — or the audio file or .npy that -o names."""
    flags = IstftFlags(n_fft, hop_length, win_length, window, center, normalized, length, sample_rate)
    subtype = subtype.upper() if subtype else None
    writable = [ext for ext in nio.AUDIO_EXTENSIONS if nio.can_write_audio(ext, subtype)]
    device = resolve_device(opts)
    job = batch.Job(
        load=load_spectrum,
        process=functools.partial(istft_process, flags=flags, device=device, notice=Notice()),
        save=functools.partial(istft_save, subtype=subtype),
        group_key=functools.partial(istft_key, flags=flags),
        length=lambda s: s.spec.shape[-1],
    )
    execute(
        inputs,
        opts,
        job,
        extensions=nio.ARRAY_EXTENSIONS,
        # Beside its input, NAME.wav is often the audio the spectrum came from: never that name.
        suffix=lambda path: ".istft.wav" if opts.output is None else ".wav",
        output_extensions=(*writable, ".npy"),
    )
