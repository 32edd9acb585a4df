#!/usr/bin/env python3
"""Regenerate nbxsig's sample files deterministically (bit-identical on every run and machine).

Usage::

    python samples/make_samples.py            # rewrite the files in samples/
    python samples/make_samples.py --check    # regenerate into a temp dir, compare byte for byte (make demo)
    python samples/make_samples.py --out DIR  # write elsewhere
    python samples/make_samples.py --espeak --out DIR   # speech from espeak-ng instead of the synthesizer

What makes the output bit-identical:

* every random number comes from ``numpy.random.RandomState`` with a fixed seed, whose stream NumPy
  has frozen (NEP 19) — unlike ``numpy.random.Generator``'s, which may change between releases; and
  only its uniform draws are used (exact 53-bit values, no libm call);
* audio is synthesized in float64 and quantized to int16 here (``numpy.rint``, ties to even), then
  written as WAV PCM_16 from the int16 array, so libsndfile does no float conversion of its own and
  writes no PEAK chunk (which carries a timestamp); a last-ulp difference in ``sin``/``exp`` between
  CPUs would have to land within ~1e-12 of a rounding tie to change a sample;
* images are computed in numpy and saved by Pillow as PNG without metadata and *without compression*
  (``compress_level=0``): deflate output differs between zlib, zlib-ng and other builds, stored blocks
  do not. That costs ~0.2 MB, well inside the samples budget;
* the spectrogram is computed in float64 from the exact int16 samples and rounded to a 2^-20 grid
  before the cast to complex64, so FFT libraries that differ in the last bits of float64 still give
  the same file; the rounding changes the audio that the iSTFT returns by < 1e-6, far below half a
  16-bit step (1.5e-5);
* no file holds a timestamp, a path, a version or a host name (``spectrogram.json`` is written with
  sorted keys).

The speech is a source-filter synthesis (glottal pulses through formant resonators, a pitch contour,
noise bursts for consonants and a chirp); ``--espeak`` uses the ``espeak-ng`` program instead. That path
is opt-in and its output is not committed: it depends on the espeak-ng version installed.
"""

from __future__ import annotations

import argparse
import filecmp
import itertools
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
from PIL import Image

HERE = Path(__file__).resolve().parent

# Spectrogram (iSTFT-head shape): n_fft=20, hop=5, periodic Hann, center=True, reflect padding.
SPEC_SOURCE = "speech_24k.wav"
SPEC_N_FFT = 20
SPEC_HOP = 5
SPEC_START = 24_000  # samples: the excerpt starts 1.0 s into speech_24k.wav (a voiced stretch)
SPEC_LENGTH = 4_800  # samples: 0.2 s -> (11, 961) complex64, ~85 kB
SPEC_GRID = 2.0**-20  # rounding grid of the real and imaginary parts (see the module docstring)

SPEECH_SECONDS = 3.0
MUSIC_RATE = 44_100
MUSIC_SECONDS = 3.0
IMAGE_SIZE = 256
# About 2.8 s at 160 words per minute with espeak-ng 1.51 (padded to SPEECH_SECONDS with silence).
ESPEAK_TEXT = "Signals and filters on the graphics card."
ESPEAK_ARGS = ("-v", "en-us", "-s", "160")

# The files this script owns, in the order it writes them.
FILES = (
    "speech_16k.wav",
    "speech_24k.wav",
    "music_44k1_stereo.wav",
    "spectrogram_nfft20_hop5.npy",
    "spectrogram_nfft20_hop5.json",
    "gray_256.png",
    "rgb_256.png",
)


# --------------------------------------------------------------------------------------------------
# Audio helpers
# --------------------------------------------------------------------------------------------------


def _to_int16(x: np.ndarray, *, peak: float = 0.89) -> np.ndarray:
    """Scale float64 audio so its peak is ``peak`` of full scale and quantize to int16 (ties to even)."""
    x = x * (peak / np.max(np.abs(x)))
    return np.clip(np.rint(x * 32767.0), -32768, 32767).astype(np.int16)


def _write_wav(path: Path, pcm: np.ndarray, rate: int) -> None:
    # int16 in, PCM_16 out: libsndfile copies the samples; a plain 44-byte RIFF header, no PEAK chunk.
    sf.write(str(path), pcm, rate, subtype="PCM_16", format="WAV")


def _smoothstep(x: np.ndarray) -> np.ndarray:
    x = np.clip(x, 0.0, 1.0)
    return x * x * (3.0 - 2.0 * x)


def _bandpass_noise(rng: np.random.RandomState, n: int, rate: int, lo: float, hi: float) -> np.ndarray:
    """Uniform noise shaped in the frequency domain to a smooth band [lo, hi] Hz, unit RMS."""
    noise = rng.random_sample(n) * 2.0 - 1.0
    spec = np.fft.rfft(noise)
    f = np.fft.rfftfreq(n, 1.0 / rate)
    hi = min(hi, 0.45 * rate)
    width = 0.15 * (hi - lo)
    gain = _smoothstep((f - lo + width) / width) * _smoothstep((hi + width - f) / width)
    y = np.fft.irfft(spec * gain, n)
    return y / np.sqrt(np.mean(y * y))


# --------------------------------------------------------------------------------------------------
# Speech: source-filter synthesis
# --------------------------------------------------------------------------------------------------

# Formant frequencies (Hz) and bandwidths (Hz) of five vowels, adult male (after Peterson & Barney).
_VOWELS = {
    "a": ((730.0, 1090.0, 2440.0, 3400.0), (90.0, 110.0, 160.0, 250.0)),
    "e": ((530.0, 1840.0, 2480.0, 3500.0), (70.0, 100.0, 160.0, 250.0)),
    "i": ((270.0, 2290.0, 3010.0, 3700.0), (60.0, 90.0, 150.0, 250.0)),
    "o": ((570.0, 840.0, 2410.0, 3400.0), (80.0, 90.0, 160.0, 250.0)),
    "u": ((300.0, 870.0, 2240.0, 3300.0), (60.0, 80.0, 150.0, 250.0)),
}

# The utterance: (start s, end s, vowel) voiced segments, and consonant events between them.
_SYLLABLES = (
    (0.18, 0.52, "a"),
    (0.62, 0.95, "i"),
    (1.00, 1.42, "o"),  # 1.0-1.2 s is the spectrogram excerpt
    (1.58, 1.90, "e"),
    (2.02, 2.46, "u"),
    (2.52, 2.80, "a"),
)
# (time s, duration s, kind): "s" fricative (high band), "sh" (mid-high band), "t"/"k" plosive bursts.
_CONSONANTS = (
    (0.10, 0.07, "s"),
    (0.55, 0.025, "t"),
    (1.46, 0.10, "sh"),
    (1.95, 0.03, "k"),
    (2.47, 0.05, "s"),
)
_CHIRP = (2.84, 0.14, 300.0, 2400.0)  # start s, duration s, start Hz, end Hz: a rising whistle


def _pitch(t: np.ndarray) -> np.ndarray:
    """Fundamental frequency contour (Hz): declination 140 -> 95 Hz with two accent peaks."""
    f0 = 140.0 - 15.0 * t
    f0 += 22.0 * np.exp(-0.5 * ((t - 0.35) / 0.12) ** 2)
    f0 += 14.0 * np.exp(-0.5 * ((t - 1.75) / 0.15) ** 2)
    return f0


def _formants_at(t: float) -> tuple[np.ndarray, np.ndarray]:
    """Formants at time ``t``: the nearest syllables' targets, interpolated across the gaps."""
    centers = [(0.5 * (s + e), v) for s, e, v in _SYLLABLES]
    if t <= centers[0][0]:
        v = _VOWELS[centers[0][1]]
        return np.array(v[0]), np.array(v[1])
    for (c0, v0), (c1, v1) in itertools.pairwise(centers):
        if t <= c1:
            w = float(_smoothstep(np.array((t - c0) / (c1 - c0))))
            f = (1 - w) * np.array(_VOWELS[v0][0]) + w * np.array(_VOWELS[v1][0])
            b = (1 - w) * np.array(_VOWELS[v0][1]) + w * np.array(_VOWELS[v1][1])
            return f, b
    v = _VOWELS[centers[-1][1]]
    return np.array(v[0]), np.array(v[1])


def _voicing(t: np.ndarray) -> np.ndarray:
    """Amplitude envelope of the voiced source: 25 ms ramps at each syllable's ends."""
    env = np.zeros_like(t)
    for i, (s, e, _) in enumerate(_SYLLABLES):
        ramp = 0.025
        seg = _smoothstep((t - s) / ramp) * _smoothstep((e - t) / ramp)
        env = np.maximum(env, seg * (1.0 - 0.12 * i / len(_SYLLABLES)))
    return env


def synth_speech(rate: int, *, seed: int) -> np.ndarray:
    """A speech-like utterance at ``rate`` Hz, ``SPEECH_SECONDS`` long, float64 (unnormalized).

    Glottal pulses (1 % jitter, 8 % shimmer) excite four formant resonators; each pulse adds the
    resonators' impulse response (damped sinusoids, -12 dB/octave tilt over the formants), so the
    formants can move pulse by pulse. Fricatives and plosives are band-limited noise bursts; a short
    chirp and a faint breath noise floor complete it.
    """
    rng = np.random.RandomState(seed)
    n = round(SPEECH_SECONDS * rate)
    t = np.arange(n) / rate
    out = np.zeros(n)
    voicing = _voicing(t)

    # Glottal pulse times: integrate the pitch contour, one pulse per period.
    ir_len = int(0.025 * rate)
    ir_t = np.arange(ir_len) / rate
    # The glottal flow pulse (a raised-cosine rise and a faster fall) low-passes the excitation.
    open_n = max(int(0.004 * rate), 2)
    g = np.concatenate(
        [
            0.5 - 0.5 * np.cos(np.pi * np.arange(open_n) / open_n),
            np.cos(0.5 * np.pi * np.arange(open_n // 2) / (open_n // 2)),
        ]
    )
    dg = np.diff(g, prepend=0.0)  # differentiated flow: lip radiation
    tp = 0.0
    while tp < SPEECH_SECONDS:
        f0 = float(_pitch(np.array(tp)))
        jitter = 1.0 + 0.01 * (rng.random_sample() * 2.0 - 1.0)
        shimmer = 1.0 + 0.08 * (rng.random_sample() * 2.0 - 1.0)
        i0 = round(tp * rate)
        amp = float(voicing[min(i0, n - 1)]) * shimmer
        if amp > 1e-3:
            freqs, bws = _formants_at(tp)
            gains = (freqs[0] / freqs) ** 2  # -12 dB/octave across the formants
            ir = np.zeros(ir_len)
            for f, b, a in zip(freqs, bws, gains, strict=True):
                ir += a * np.exp(-np.pi * b * ir_t) * np.sin(2.0 * np.pi * f * ir_t)
            pulse = np.convolve(dg, ir)
            stop = min(i0 + pulse.size, n)
            out[i0:stop] += amp * pulse[: stop - i0]
        tp += jitter / f0
    voiced_rms = np.sqrt(np.mean(out[voicing > 0.5] ** 2))

    # Consonants: band-limited noise bursts with sharp onsets.
    bands = {
        "s": (4000.0, 7500.0, 0.45),
        "sh": (2000.0, 5000.0, 0.5),
        "t": (2500.0, 8000.0, 0.9),
        "k": (1200.0, 3500.0, 0.9),
    }
    for start, dur, kind in _CONSONANTS:
        lo, hi, level = bands[kind]
        m = round(dur * rate)
        i0 = round(start * rate)
        u = np.arange(m) / m
        if kind in ("t", "k"):
            env = np.exp(-6.0 * u) * _smoothstep(u * 20.0)  # burst: instant onset, quick decay
        else:
            env = _smoothstep(u * 4.0) * _smoothstep((1.0 - u) * 4.0)
        out[i0 : i0 + m] += level * voiced_rms * env * _bandpass_noise(rng, m, rate, lo, hi)

    # A rising chirp (linear sweep) with smooth ends.
    start, dur, fa, fb = _CHIRP
    m = round(dur * rate)
    i0 = round(start * rate)
    u = np.arange(m) / rate
    phase = 2.0 * np.pi * (fa * u + 0.5 * (fb - fa) / dur * u * u)
    out[i0 : i0 + m] += 0.6 * voiced_rms * np.sin(phase) * np.sin(np.pi * u / dur) ** 2

    # Breath/room noise floor about 45 dB below the voice.
    out += 0.0056 * voiced_rms * _bandpass_noise(rng, n, rate, 100.0, 6000.0)
    return out


def espeak_speech(rate: int, *, text: str) -> np.ndarray:
    """Speech from the ``espeak-ng`` program (22.05 kHz), resampled to ``rate`` and fitted to 3 s."""
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise SystemExit(
            "--espeak needs the espeak-ng program, which is not on PATH; install it (Debian/Ubuntu: "
            "apt-get install espeak-ng) or drop --espeak to use the synthetic speech"
        )
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "espeak.wav"
        subprocess.run([exe, *ESPEAK_ARGS, "-w", str(wav), text], check=True)
        x, src_rate = sf.read(str(wav), dtype="float64", always_2d=True)
    x = x[:, 0]
    # Band-limited (FFT) resampling: exact for this offline, one-off use and needs no extra package.
    n_out = round(x.size * rate / src_rate)
    spec = np.fft.rfft(x)
    keep = min(spec.size, n_out // 2 + 1)
    y = np.fft.irfft(spec[:keep], n_out) * (n_out / x.size)
    n = round(SPEECH_SECONDS * rate)
    return np.pad(y[:n], (0, max(0, n - y.size)))


# --------------------------------------------------------------------------------------------------
# Music: stereo notes with harmonics and decay
# --------------------------------------------------------------------------------------------------

# (onset s, MIDI note, velocity 0..1, pan -1 left .. +1 right)
_NOTES = (
    (0.00, 48, 0.8, -0.1),  # C3 bass, held
    (0.05, 60, 0.7, -0.6),  # C4
    (0.45, 64, 0.6, 0.5),  # E4
    (0.85, 67, 0.6, -0.3),  # G4
    (1.25, 72, 0.65, 0.7),  # C5
    (1.60, 43, 0.75, 0.1),  # G2 bass
    (1.65, 71, 0.55, -0.7),  # B4
    (2.05, 62, 0.6, 0.4),  # D4, G4, D5: a closing G chord over D, rolled
    (2.10, 67, 0.5, -0.4),
    (2.15, 74, 0.5, 0.8),
)


def synth_music(*, seed: int) -> np.ndarray:
    """A plucked/piano-like phrase, ``[n, 2]`` float64: harmonics with per-partial decay, panned notes."""
    rng = np.random.RandomState(seed)
    rate = MUSIC_RATE
    n = round(MUSIC_SECONDS * rate)
    t = np.arange(n) / rate
    out = np.zeros((n, 2))
    for onset, note, vel, pan in _NOTES:
        f0 = 440.0 * 2.0 ** ((note - 69) / 12.0)
        i0 = round(onset * rate)
        u = t[: n - i0]
        tone = np.zeros_like(u)
        for k in range(1, 13):
            fk = k * f0 * np.sqrt(1.0 + 0.0004 * k * k)  # slight string inharmonicity
            if fk > 0.45 * rate:
                break
            decay = 1.2 + 0.9 * k  # 1/s: upper partials die first
            phase = 2.0 * np.pi * rng.random_sample()
            tone += (1.0 / k**1.3) * np.exp(-decay * u) * np.sin(2.0 * np.pi * fk * u + phase)
        attack = _smoothstep(u / 0.006)
        tone *= vel * attack
        # Constant-power pan, plus a 0.3 ms inter-channel delay toward the far side.
        theta = 0.25 * np.pi * (pan + 1.0)
        delay = round(0.0003 * rate * abs(pan))
        left, right = np.cos(theta) * tone, np.sin(theta) * tone
        far = 0 if pan > 0 else 1
        near = np.stack([left, right], axis=1)
        near[:, far] = np.concatenate([np.zeros(delay), near[: near.shape[0] - delay, far]])
        out[i0:] += near
    fade = _smoothstep((MUSIC_SECONDS - t) / 0.25)  # fade the tail out over the last 250 ms
    return out * fade[:, None]


# --------------------------------------------------------------------------------------------------
# Spectrogram
# --------------------------------------------------------------------------------------------------


def spectrogram(pcm: np.ndarray) -> np.ndarray:
    """``torch.stft`` of an excerpt of ``pcm`` (int16), in float64, rounded to ``SPEC_GRID``, complex64."""
    x = torch.from_numpy(pcm[SPEC_START : SPEC_START + SPEC_LENGTH].astype(np.float64) / 32768.0)
    window = torch.hann_window(SPEC_N_FFT, periodic=True, dtype=torch.float64)
    spec = torch.stft(
        x,
        n_fft=SPEC_N_FFT,
        hop_length=SPEC_HOP,
        win_length=SPEC_N_FFT,
        window=window,
        center=True,
        pad_mode="reflect",
        normalized=False,
        onesided=True,
        return_complex=True,
    ).numpy()
    re = np.rint(spec.real / SPEC_GRID) * SPEC_GRID
    im = np.rint(spec.imag / SPEC_GRID) * SPEC_GRID
    # |values| < 16 keeps a 2^-20 grid inside float32's 24-bit significand, so the cast is exact.
    assert max(np.max(np.abs(re)), np.max(np.abs(im))) < 16.0
    return (re + 1j * im).astype(np.complex64)


def spectrogram_params(shape: tuple[int, ...]) -> dict[str, object]:
    return {
        "source": SPEC_SOURCE,
        "source_start_sample": SPEC_START,
        "source_num_samples": SPEC_LENGTH,
        "source_scale": "int16 / 32768 (what soundfile.read returns as float)",
        "sample_rate": 24_000,
        "n_fft": SPEC_N_FFT,
        "hop_length": SPEC_HOP,
        "win_length": SPEC_N_FFT,
        "window": "hann, periodic",
        "center": True,
        "pad_mode": "reflect",
        "normalized": False,
        "onesided": True,
        "dtype": "complex64",
        "shape": list(shape),
        "rounding": "float64 STFT rounded to multiples of 2^-20 before the cast to complex64",
        "istft": "torch.istft(torch.from_numpy(s), n_fft=20, hop_length=5, "
        "window=torch.hann_window(20), center=True) returns the excerpt; length = (T - 1) * 5",
    }


# --------------------------------------------------------------------------------------------------
# Images
# --------------------------------------------------------------------------------------------------


def _coords(size: int) -> tuple[np.ndarray, np.ndarray]:
    """Pixel-centre coordinates in [0, 1), (y, x) each ``[size, size]``."""
    c = (np.arange(size) + 0.5) / size
    return np.meshgrid(c, c, indexing="ij")


def _disk(y: np.ndarray, x: np.ndarray, cy: float, cx: float, r: float, size: int) -> np.ndarray:
    """Anti-aliased disk coverage in [0, 1] (a one-pixel linear ramp at the edge)."""
    d = np.sqrt((y - cy) ** 2 + (x - cx) ** 2)
    return np.clip((r - d) * size + 0.5, 0.0, 1.0)


def _box(y: np.ndarray, x: np.ndarray, y0: float, x0: float, y1: float, x1: float, size: int) -> np.ndarray:
    cov_y = np.clip(np.minimum(y - y0, y1 - y) * size + 0.5, 0.0, 1.0)
    cov_x = np.clip(np.minimum(x - x0, x1 - x) * size + 0.5, 0.0, 1.0)
    return cov_y * cov_x


def _to_uint8(img: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(img * 255.0), 0, 255).astype(np.uint8)


def synth_gray(*, seed: int, size: int = IMAGE_SIZE) -> np.ndarray:
    """``[size, size]`` uint8: gradient, hard-edged shapes, a grating, a noise patch, a zone plate."""
    rng = np.random.RandomState(seed)
    y, x = _coords(size)
    img = 0.15 + 0.55 * x + 0.1 * y  # diagonal ramp
    img = img * (1 - (a := _disk(y, x, 0.3, 0.3, 0.17, size))) + 0.95 * a  # bright disk
    img = img * (1 - (a := _box(y, x, 0.58, 0.08, 0.9, 0.42, size))) + 0.05 * a  # dark square
    # Sinusoidal grating (period 8 px) in the top-right quadrant: a band-pass target for blurs.
    a = _box(y, x, 0.06, 0.56, 0.44, 0.94, size)
    img = img * (1 - a) + a * (0.5 + 0.4 * np.sin(2.0 * np.pi * x * size / 8.0))
    # Uniform noise texture, 4x4-pixel cells, bottom-right.
    cells = rng.random_sample((size // 4, size // 4)).repeat(4, axis=0).repeat(4, axis=1)
    a = _box(y, x, 0.56, 0.56, 0.94, 0.94, size)
    img = img * (1 - a) + a * (0.2 + 0.6 * cells)
    # Small zone plate (chirped rings) in the middle: every edge orientation and frequency.
    r2 = ((y - 0.5) ** 2 + (x - 0.5) ** 2) * size * size
    a = _disk(y, x, 0.5, 0.5, 0.1, size)
    img = img * (1 - a) + a * (0.5 + 0.45 * np.cos(np.pi * r2 / 60.0))
    return _to_uint8(img)


def synth_rgb(*, seed: int, size: int = IMAGE_SIZE) -> np.ndarray:
    """``[size, size, 3]`` uint8: colour gradients, coloured shapes, a checkerboard, a noise texture."""
    rng = np.random.RandomState(seed)
    y, x = _coords(size)
    img = np.stack([0.1 + 0.8 * x, 0.1 + 0.8 * y, 0.9 - 0.8 * (x + y) / 2.0], axis=-1)

    def paint(alpha: np.ndarray, color: tuple[float, float, float] | np.ndarray) -> None:
        nonlocal img
        img = img * (1 - alpha[..., None]) + alpha[..., None] * np.asarray(color)

    paint(_disk(y, x, 0.28, 0.72, 0.16, size), (0.95, 0.2, 0.15))  # red disk
    paint(_box(y, x, 0.12, 0.1, 0.42, 0.4, size), (0.1, 0.6, 0.2))  # green square
    # Triangle (blue): inside three half-planes, with a one-pixel ramp on each edge.
    e1 = (y - 0.55) * size
    e2 = ((0.95 - y) - 1.6 * np.abs(x - 0.27)) * size / np.sqrt(1.0 + 1.6**2)
    paint(np.clip(np.minimum(e1, e2) + 0.5, 0.0, 1.0), (0.15, 0.25, 0.9))
    # Checkerboard, 16-pixel squares, in the bottom-right: sharp edges in both directions.
    checker = ((np.floor(x * size / 16) + np.floor(y * size / 16)) % 2).astype(np.float64)
    a = _box(y, x, 0.55, 0.55, 0.95, 0.95, size)
    paint(a, np.stack([checker, checker * 0.9, 0.2 + 0.6 * checker], axis=-1))
    # Per-channel fine noise over the whole image (+-4 levels): texture for denoising/blur filters.
    noise = (rng.random_sample((size, size, 3)) - 0.5) * (8.0 / 255.0)
    return _to_uint8(img + noise)


def _write_png(path: Path, pixels: np.ndarray) -> None:
    # No pnginfo, no dpi, no icc: IHDR, IDAT, IEND only. compress_level=0: stored deflate blocks,
    # identical under every zlib build (compressed output is not).
    Image.fromarray(pixels).save(str(path), format="PNG", compress_level=0, optimize=False)


# --------------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------------


def generate(out: Path, *, espeak: bool = False) -> list[Path]:
    """Write every sample file into ``out``; returns their paths in ``FILES`` order."""
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def speech(rate: int, seed: int) -> np.ndarray:
        x = espeak_speech(rate, text=ESPEAK_TEXT) if espeak else synth_speech(rate, seed=seed)
        return _to_int16(x)

    pcm16 = speech(16_000, 1601)
    pcm24 = speech(24_000, 2401)
    steps: list[tuple[str, Callable[[Path], None]]] = [
        ("speech_16k.wav", lambda p: _write_wav(p, pcm16, 16_000)),
        ("speech_24k.wav", lambda p: _write_wav(p, pcm24, 24_000)),
        ("music_44k1_stereo.wav", lambda p: _write_wav(p, _to_int16(synth_music(seed=4410)), MUSIC_RATE)),
    ]
    spec = spectrogram(pcm24)
    steps += [
        ("spectrogram_nfft20_hop5.npy", lambda p: np.save(str(p), spec, allow_pickle=False)),
        (
            "spectrogram_nfft20_hop5.json",
            lambda p: p.write_text(
                json.dumps(spectrogram_params(spec.shape), indent=2, sort_keys=True) + "\n"
            ),
        ),
        ("gray_256.png", lambda p: _write_png(p, synth_gray(seed=256))),
        ("rgb_256.png", lambda p: _write_png(p, synth_rgb(seed=257))),
    ]
    assert tuple(name for name, _ in steps) == FILES
    for name, write in steps:
        path = out / name
        write(path)
        written.append(path)
    return written


def _describe_difference(name: str, committed: Path, fresh: Path) -> str:
    """Why two versions of a file differ, in terms a person can act on."""
    try:
        if name.endswith(".wav"):
            a, ra = sf.read(str(committed), dtype="int16", always_2d=True)
            b, rb = sf.read(str(fresh), dtype="int16", always_2d=True)
            if (ra, a.shape) != (rb, b.shape):
                return f"rate/shape {ra} Hz {a.shape} committed vs {rb} Hz {b.shape} regenerated"
            d = np.abs(a.astype(np.int32) - b.astype(np.int32))
            return f"{int(np.count_nonzero(d))} samples differ, by up to {int(d.max())} LSB"
        if name.endswith(".png"):
            a = np.asarray(Image.open(committed))
            b = np.asarray(Image.open(fresh))
            if a.shape == b.shape and np.array_equal(a, b):
                return "pixels identical, PNG bytes differ (a different Pillow PNG writer)"
            if a.shape != b.shape:
                return f"shape {a.shape} committed vs {b.shape} regenerated"
            return f"{int(np.count_nonzero(a != b))} pixel values differ"
        if name.endswith(".npy"):
            a, b = np.load(committed), np.load(fresh)
            if a.shape != b.shape or a.dtype != b.dtype:
                return f"{a.dtype}{a.shape} committed vs {b.dtype}{b.shape} regenerated"
            return (
                f"{int(np.count_nonzero(a != b))} values differ, by up to {float(np.max(np.abs(a - b))):.3g}"
            )
    except Exception as exc:  # a damaged committed file: say so rather than crash the check
        return f"could not compare contents ({type(exc).__name__}: {exc})"
    return "contents differ"


def check(committed_dir: Path) -> int:
    """Regenerate into a temp dir and compare byte for byte with ``committed_dir``; 0 when identical."""
    with tempfile.TemporaryDirectory(prefix="nbxsig-samples-") as tmp:
        generate(Path(tmp))
        problems = []
        for name in FILES:
            committed, fresh = committed_dir / name, Path(tmp) / name
            if not committed.is_file():
                problems.append(f"  {name}: missing from {committed_dir}")
            elif not filecmp.cmp(committed, fresh, shallow=False):
                problems.append(
                    f"  {name}: differs from the regenerated file: "
                    + _describe_difference(name, committed, fresh)
                )
    if problems:
        print(
            f"samples check FAILED: {len(problems)} of {len(FILES)} files in {committed_dir} do not match "
            "what samples/make_samples.py generates now:\n" + "\n".join(problems) + "\n"
            "If the generator was changed on purpose, run `python samples/make_samples.py` "
            "and commit the files.",
            file=sys.stderr,
        )
        return 1
    print(
        f"samples check passed: {len(FILES)} files in {committed_dir} are byte-identical "
        "to a fresh generation"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE, help="directory to write into (default: samples/)")
    parser.add_argument(
        "--check",
        action="store_true",
        help="regenerate into a temp dir and verify the files in --out are byte-identical (exit 1 otherwise)",
    )
    parser.add_argument(
        "--espeak",
        action="store_true",
        help="speech from the espeak-ng program instead of the synthesizer (opt-in: not what is committed, "
        "depends on the installed espeak-ng version; cannot be combined with --check)",
    )
    args = parser.parse_args(argv)
    if args.check and args.espeak:
        parser.error(
            "--check compares against the committed synthetic speech; it cannot be combined with --espeak"
        )
    if args.check:
        return check(args.out)
    for path in generate(args.out, espeak=args.espeak):
        print(f"{path}  {path.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
