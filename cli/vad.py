"""``nbxsig vad``: voice activity segments from mel energy and spectral flux.

A detector without a model, on nbxsig's batched (GPU) mel spectrograms: a frame is active when its
level stands ``--threshold-db`` above the file's own noise floor (a low percentile of its frame
levels), or half that with a spectral-flux onset; short gaps are bridged, short bursts dropped,
segments padded. Good for trimming silence and splitting recordings with a stationary background;
it does not tell speech from other sounds.
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import click
import numpy as np

from nbxsig import batch
from nbxsig import io as nio

from . import features
from ._common import BatchOptions, FiniteFloat, Notice, batch_options, execute, read_signal, resolve_device


@dataclass(frozen=True)
class VadParams:
    frame_ms: float
    hop_ms: float
    n_mels: int
    threshold_db: float
    floor_percentile: float
    flux_db: float
    min_level_db: float
    min_speech_ms: float
    min_silence_ms: float
    pad_ms: float


def frame_features(mel: np.ndarray, *, n_fft: int, window_power: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-frame level (dB, ≈ dBFS: 0 dB for a full-scale square wave) and spectral flux (mean rise of
    the log-mel bands over the previous frame, dB) from mel power ``(channels, n_mels, frames)``;
    channels are averaged in power (no phase cancellation)."""
    power = mel.astype(np.float64).mean(axis=0)  # (n_mels, frames)
    # Parseval: Σ_f |X_f|² over the one-sided spectrum ≈ n_fft · Σ (x·w)² / 2; the mel filters
    # (triangles summing to ~1 across the band) keep that sum.
    level = 10.0 * np.log10(2.0 * power.sum(axis=0) / (n_fft * window_power) + 1e-12)
    log_mel = 10.0 * np.log10(power + 1e-10)
    rise = np.maximum(np.diff(log_mel, axis=1), 0.0).mean(axis=0)
    flux = np.concatenate([[0.0], rise])
    return level, flux


def active_frames(level: np.ndarray, flux: np.ndarray, p: VadParams) -> np.ndarray:
    """The per-frame decision (before bridging/dropping): above the noise floor by ``threshold_db``,
    or by half of it at a flux onset, and never below ``min_level_db``."""
    if level.size == 0:
        return np.zeros(0, bool)
    floor = np.percentile(level, p.floor_percentile)
    loud = level > floor + p.threshold_db
    onset = (level > floor + p.threshold_db / 2) & (flux > p.flux_db)
    return (loud | onset) & (level > p.min_level_db)


def segments_from_mask(
    mask: np.ndarray,
    *,
    hop_s: float,
    duration: float,
    min_speech_s: float,
    min_silence_s: float,
    pad_s: float,
) -> list[tuple[float, float]]:
    """Runs of active frames → ``[(start, end)]`` in seconds (frame ``t`` is centred at ``t·hop``):
    gaps shorter than ``min_silence_s`` are bridged, then segments shorter than ``min_speech_s``
    dropped, then each is padded by ``pad_s`` (clipped to ``[0, duration]``) and overlaps merged."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]])))
    runs = [[s * hop_s, e * hop_s] for s, e in zip(edges[::2], edges[1::2], strict=True)]
    bridged: list[list[float]] = []
    for run in runs:
        if bridged and run[0] - bridged[-1][1] < min_silence_s:
            bridged[-1][1] = run[1]
        else:
            bridged.append(run)
    out: list[tuple[float, float]] = []
    for start, end in bridged:
        if end - start < min_speech_s:
            continue
        start, end = max(0.0, start - pad_s), min(duration, end + pad_s)
        if out and start <= out[-1][1] + 1e-9:  # touching (up to rounding) merges too
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


@dataclass
class VadResult:
    sample_rate: int
    duration: float
    segments: list[tuple[float, float]]


def vad_process(items: list[nio.Audio], *, p: VadParams, device: Any, notice: Notice) -> list[VadResult]:
    """Batched mel power on the device (the ``nbxsig mel`` path), then the decision per file on the CPU
    (a few numbers per frame)."""
    rate = items[0].sample_rate  # the group key makes the rates equal
    n_fft = max(2, round(p.frame_ms * rate / 1000))
    hop = max(1, round(p.hop_ms * rate / 1000))
    mp = features.MelParams(None, n_fft, hop, p.n_mels, 0.0, None, False, False)
    hint = "lower --n-mels or raise --frame-ms"
    mels = features.mel_process(items, p=mp, device=device, notice=notice, hint=hint)
    window_power = float((np.hanning(n_fft + 1)[:-1] ** 2).sum())  # the periodic Hann's Σw²
    out = []
    for it, mel in zip(items, mels, strict=True):
        level, flux = frame_features(mel, n_fft=n_fft, window_power=window_power)
        duration = it.samples / rate
        spans = segments_from_mask(
            active_frames(level, flux, p),
            hop_s=hop / rate,
            duration=duration,
            min_speech_s=p.min_speech_ms / 1000,
            min_silence_s=p.min_silence_ms / 1000,
            pad_s=p.pad_ms / 1000,
        )
        out.append(VadResult(rate, duration, spans))
    return out


def vad_save(item: nio.Audio, result: VadResult, output: Path, *, p: VadParams) -> None:
    record = {
        "sample_rate": result.sample_rate,
        "duration": round(result.duration, 6),
        "speech_seconds": round(sum(e - s for s, e in result.segments), 3),
        "segments": [{"start": round(s, 3), "end": round(e, 3)} for s, e in result.segments],
        "params": asdict(p),
    }
    with nio.atomic_open(output) as f:
        f.write((json.dumps(record, indent=1, allow_nan=False) + "\n").encode("utf-8"))


@click.command()
@click.argument("inputs", nargs=-1, required=True, metavar="INPUT...")
@click.option(
    "--sample-rate", type=click.IntRange(min=1), help="Rate of .npy waveforms (Hz). Default: 16000."
)
@click.option("--frame-ms", type=FiniteFloat(min=1.0, max=1000.0), default=25.0, show_default=True)
@click.option("--hop-ms", type=FiniteFloat(min=1.0, max=1000.0), default=10.0, show_default=True)
@click.option("--n-mels", type=click.IntRange(min=1, max=256), default=40, show_default=True)
@click.option(
    "--threshold-db",
    type=FiniteFloat(min=0.0),
    default=12.0,
    show_default=True,
    help="How far above the file's noise floor a frame's level must be.",
)
@click.option(
    "--floor-percentile",
    type=FiniteFloat(min=0.0, max=100.0),
    default=10.0,
    show_default=True,
    help="The noise floor: this percentile of the file's frame levels.",
)
@click.option(
    "--flux-db",
    type=FiniteFloat(min=0.0),
    default=3.0,
    show_default=True,
    help="A frame above the floor by half the threshold is active when its bands rise by this much.",
)
@click.option(
    "--min-level-db",
    type=FiniteFloat(),
    default=-60.0,
    show_default=True,
    help="Frames quieter than this (≈ dBFS) are never active.",
)
@click.option("--min-speech-ms", type=FiniteFloat(min=0.0), default=100.0, show_default=True)
@click.option("--min-silence-ms", type=FiniteFloat(min=0.0), default=200.0, show_default=True)
@click.option("--pad-ms", type=FiniteFloat(min=0.0), default=50.0, show_default=True)
@batch_options
def vad(
    inputs: tuple[str, ...],
    sample_rate: int | None,
    frame_ms: float,
    hop_ms: float,
    n_mels: int,
    threshold_db: float,
    floor_percentile: float,
    flux_db: float,
    min_level_db: float,
    min_speech_ms: float,
    min_silence_ms: float,
    pad_ms: float,
    opts: BatchOptions,
) -> None:
    """Voice-activity segments of audio files (or .npy waveforms) into .json files:
    {"sample_rate", "duration", "speech_seconds", "segments": [{"start", "end"} in s], "params"}
    (`nbxsig plot --segments FILE.json` overlays them). Energy above the file's noise floor plus
    spectral-flux onsets, on mel spectrograms computed in batches on the device; no model."""
    p = VadParams(
        frame_ms,
        hop_ms,
        n_mels,
        threshold_db,
        floor_percentile,
        flux_db,
        min_level_db,
        min_speech_ms,
        min_silence_ms,
        pad_ms,
    )
    device = resolve_device(opts)
    started = batch.start_device(device, modules=features.MEL_MODULES)
    mel_p = features.MelParams(None, 0, 0, n_mels, 0.0, None, False, False)
    job = batch.Job(
        load=functools.partial(
            read_signal, default_rate=sample_rate or features.DEFAULT_ARRAY_RATE, pcm16=True
        ),
        process=functools.partial(vad_process, p=p, device=device, notice=Notice()),
        save=functools.partial(vad_save, p=p),
        group_key=functools.partial(features.mel_key, p=mel_p),
        length=lambda a: a.samples,
        warm_up=device.type == "cuda",
    )
    execute(
        inputs,
        opts,
        job,
        extensions=(*nio.AUDIO_EXTENSIONS, ".npy"),
        suffix=lambda path: ".json",
        output_extensions=(".json",),
        started=started,
    )
