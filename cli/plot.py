"""``nbxsig plot``: a picture of a signal, like sox's spectrogram effect (matplotlib, optional extra)."""

from __future__ import annotations

import functools
import io as stdio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import numpy as np

from nbxsig import batch
from nbxsig import io as nio

from ._common import BatchOptions, batch_options, execute, make_window, resolve_device
from .spectral import stored_param, stored_params

#: dB range shown below each picture's peak.
DYNAMIC_RANGE_DB = 100.0


@dataclass
class Plottable:
    """What a file holds: a waveform (C, L), a complex spectrum (C, F, T) or real features (C, B, T)."""

    kind: str  # "waveform", "spectrum", "features"
    data: np.ndarray
    sample_rate: int
    hop_length: int | None = None
    n_fft: int | None = None
    rate_assumed: bool = False
    name: str = ""
    path: str = ""
    #: What the CLI warned about it (:meth:`Notice.file_warning`), for its manifest row.
    warnings: list[str] = field(default_factory=list)

    @property
    def samples(self) -> int | None:
        return int(self.data.shape[-1]) if self.kind == "waveform" else None


def load_plottable(path: Path, *, sample_rate: int, hop_length: int | None) -> Plottable:
    """Read ``path`` for plotting (its name becomes the title)."""
    item = _load_plottable(path, sample_rate=sample_rate, hop_length=hop_length)
    item.name, item.path = path.name, str(path)
    return item


def _load_plottable(path: Path, *, sample_rate: int, hop_length: int | None) -> Plottable:
    """Audio or a real 1-D/2-D .npy → waveform; a complex .npy or an .npz from ``nbxsig stft`` →
    spectrum; a real 3-D .npy (e.g. from ``nbxsig mel``) → features."""
    if nio.kind_of(path) == "audio" or (path.suffix.lower() == ".npy" and _npy_ndim(path) in (1, 2)):
        a = nio.read_signal(path, default_rate=sample_rate)
        return Plottable("waveform", a.data, a.sample_rate, rate_assumed=a.rate_assumed)
    if nio.kind_of(path) != "array":
        nio._check_readable(path)
        raise nio.InputFileError(f"{path}: unsupported input type (expected audio, .npy or .npz)")
    loaded = nio.read_array(path)
    if isinstance(loaded, dict):
        if "spec" not in loaded:
            raise nio.InputFileError(f"{path}: an .npz input needs a 'spec' array (from nbxsig stft)")
        spec = loaded["spec"]
        # Checked as istft checks them: a 0 rate or a text hop must fail the file in words, not as
        # Python's "division by zero", nor draw a plot on a negative time axis.
        stored = stored_params(loaded, ("sample_rate", "hop_length", "n_fft"))
        rate = stored_param(stored, "sample_rate", int)
        hop = stored_param(stored, "hop_length", int) or hop_length
        n_fft = stored_param(stored, "n_fft", int)
        spectrum = _as_3d(path, spec)
        return Plottable("spectrum", spectrum, rate or sample_rate, hop, n_fft, rate_assumed=rate is None)
    arr = _as_3d(path, loaded)
    return Plottable("spectrum" if np.iscomplexobj(arr) else "features", arr, sample_rate, hop_length)


def _npy_ndim(path: Path) -> int | None:
    try:
        arr = np.load(str(path), mmap_mode="r", allow_pickle=False)
        return None if np.iscomplexobj(arr) else arr.ndim
    except Exception:  # reported properly by the loader that follows
        return None


def _as_3d(path: Path, arr: np.ndarray) -> np.ndarray:
    if arr.ndim < 2 or arr.size == 0:
        raise nio.InputFileError(f"{path}: expected (..., bins, frames), got shape {arr.shape}")
    # Numbers only: strings or dates would fail inside NumPy, in its words.
    if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        raise nio.InputFileError(
            f"{path}: expected numbers (complex, float or integer), got dtype {arr.dtype}"
        )
    nio.check_finite(path, arr)
    return arr.reshape(-1, *arr.shape[-2:])


def _db(power: np.ndarray) -> np.ndarray:
    db = 10.0 * np.log10(np.maximum(power, 1e-20))
    return np.maximum(db, db.max() - DYNAMIC_RANGE_DB)


def read_segments(path: str) -> list[tuple[float, float]]:
    """Segments in seconds from JSON (``[[start, end], ...]`` or ``[{"start": s, "end": e}, ...]``,
    or an object holding such a list under ``"segments"``, as ``nbxsig vad`` writes) or text
    (``start end`` per line; extra columns ignored)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:  # (an .npz or a WAV given by mistake: not the codec's byte offsets)
        raise ValueError("not a JSON or text file (it is not UTF-8 text)") from None
    try:
        data = json.loads(text)
        if isinstance(data, dict):
            data = data["segments"]
    except json.JSONDecodeError:
        data = [line.replace(",", " ").split()[:2] for line in text.splitlines() if line.strip()]
        data = [row for row in data if not row[0].startswith("#")]
    out = []
    for row in data:
        start, end = (row["start"], row["end"]) if isinstance(row, dict) else row[:2]
        out.append((float(start), float(end)))
    return out


def render(
    item: Plottable, *, title: str, n_fft: int, device: Any, segments: list[tuple[float, float]]
) -> bytes:
    """A PNG: waveform over spectrogram (dB, time in s, frequency in Hz) for audio; the spectrogram
    or feature image alone for spectra and features."""
    import torch
    from matplotlib.figure import Figure

    import nbxsig.stft
    from nbxsig.errors import ParameterValueError
    from nbxsig.streaming import default_hop_length

    rate = item.sample_rate
    panels = 2 if item.kind == "waveform" else 1
    fig = Figure(figsize=(10, 3.2 * panels), layout="constrained")
    axes = fig.subplots(panels, 1, sharex=True, squeeze=False)[:, 0]
    if item.kind == "waveform":
        x = item.data
        t = np.arange(x.shape[-1]) / rate
        for c, row in enumerate(x):
            axes[0].plot(t, row, linewidth=0.5, label=f"ch {c}" if x.shape[0] > 1 else None)
        axes[0].set_ylabel("amplitude")
        axes[0].set_xlim(0, x.shape[-1] / rate)
        if x.shape[0] > 1:
            axes[0].legend(loc="upper right", fontsize="small")
        n = min(n_fft, x.shape[-1])
        try:  # torch's default, as the library takes it
            hop = default_hop_length(n)
        except ParameterValueError:  # fewer than 4 samples: a frame per sample
            hop = 1
        signal = torch.from_numpy(x.mean(axis=0, dtype=np.float64).astype(np.float32)).to(device)
        window = make_window("hann", n, device=device)
        spec = nbxsig.stft.stft(signal, n, hop_length=hop, window=window, center=True, pad_mode="constant")
        # Power in float64: |X|² of a loud float32 signal may exceed float32's range.
        image, hop_s, top = _db(spec.abs().double().square().cpu().numpy()), hop / rate, rate / 2
        label, is_db = "frequency (Hz)", True
    elif item.kind == "spectrum":
        image = _db(np.abs(item.data).mean(axis=0, dtype=np.float64) ** 2)  # float64: no overflow
        hop_s = (item.hop_length or 1) / rate
        top, label, is_db = rate / 2, "frequency (Hz)", True
    else:
        feats = item.data.mean(axis=0, dtype=np.float64)  # float64: a float32 sum may overflow
        is_db = bool(feats.min() >= 0)  # power features are shown in dB; log features as they are
        image = _db(feats) if is_db else feats
        hop_s = (item.hop_length or 1) / rate
        top, label = feats.shape[0], "bin"
    ax = axes[-1]
    extent = (0.0, image.shape[-1] * hop_s, 0.0, top)
    im = ax.imshow(image, origin="lower", aspect="auto", extent=extent, cmap="magma", interpolation="nearest")
    fig.colorbar(im, ax=ax, label="dB" if is_db else "value", pad=0.01)
    ax.set_ylabel(label)
    ax.set_xlabel("time (s)")
    for start, end in segments:
        for a in axes:
            a.axvspan(start, end, color="tab:green", alpha=0.25, linewidth=0)
    fig.suptitle(title, fontsize="medium")
    buf = stdio.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def plot_process(
    items: list[Plottable], *, n_fft: int, device: Any, segments: list[tuple[float, float]]
) -> list[bytes]:
    out = []
    for it in items:
        title = f"{it.name}: {it.kind}, {it.sample_rate} Hz"
        out.append(render(it, title=title, n_fft=n_fft, device=device, segments=segments))
    return out


def plot_save(item: Plottable, png: bytes, output: Path) -> None:
    with nio.atomic_open(output) as f:
        f.write(png)


@click.command()
@click.argument("inputs", nargs=-1, required=True, metavar="INPUT...")
@click.option("--n-fft", type=click.IntRange(min=2), default=1024, show_default=True, help="For audio.")
@click.option(
    "--sample-rate",
    type=click.IntRange(min=1),
    default=16000,
    show_default=True,
    help="Rate (Hz) of .npy inputs, which carry none.",
)
@click.option(
    "--hop-length", type=click.IntRange(min=1), default=160, show_default=True, help="Of .npy features."
)
@click.option(
    "--segments",
    metavar="FILE",
    help="Segments to overlay, in s: JSON [[start, end], ...], `nbxsig vad`'s JSON, or 'start end' lines.",
)
@batch_options
def plot(
    inputs: tuple[str, ...],
    n_fft: int,
    sample_rate: int,
    hop_length: int,
    segments: str | None,
    opts: BatchOptions,
) -> None:
    """Draw a PNG of each input: waveform and spectrogram (dB; time in s, frequency in Hz) of audio
    or .npy waveforms; the spectrogram of an .npz from `nbxsig stft` or a complex .npy; the image of
    .npy features such as `nbxsig mel`'s. Needs matplotlib (pip install 'nbxsig[plot]')."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise click.UsageError("nbxsig plot needs matplotlib: pip install 'nbxsig[plot]'") from None
    try:
        spans = read_segments(segments) if segments else []
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise click.BadParameter(f"cannot read {segments}: {exc}", param_hint="--segments") from None
    device = resolve_device(opts)
    job = batch.Job(
        load=functools.partial(load_plottable, sample_rate=sample_rate, hop_length=hop_length),
        process=functools.partial(plot_process, n_fft=n_fft, device=device, segments=spans),
        save=plot_save,
    )
    extensions = (*nio.AUDIO_EXTENSIONS, *nio.ARRAY_EXTENSIONS)
    execute(
        inputs,
        opts,
        job,
        extensions=extensions,
        suffix=lambda path: ".png",
        output_extensions=(".png",),
        protect=[segments] if segments else [],
    )
