"""File input/output for the CLI and for scripts: audio, arrays, images, atomic writes.

Audio goes through ``soundfile`` (libsndfile: WAV, FLAC, OGG/Vorbis, AIFF, ...), arrays are ``.npy``
/ ``.npz``, images go through Pillow. The imports happen inside the functions, so ``import nbxsig.io``
works on a machine without soundfile (the GPU machine); there, integer-PCM WAV files are still read
(through the standard library's ``wave``), and other audio raises InputFileError.

Every writer is atomic: the data goes to a hidden temporary sibling of the destination
(``.NAME.tmp-PID-RANDOM``), which is flushed, fsync'ed and renamed over the destination. A process
killed mid-write leaves no partial output under the destination's name; :func:`remove_stale_temps`
removes temporaries a killed process left behind. With the environment variable ``NBXSIG_FSYNC=0``
the fsync is skipped (faster on slow disks): the rename still protects against a killed process,
but a power loss or OS crash may then leave recent outputs empty or partial.

Example::

    from nbxsig import io
    audio = io.read_audio("speech.flac")        # Audio(data (C, L) float32, sample_rate, subtype)
    io.write_audio("out.wav", audio.data, audio.sample_rate, subtype="PCM_16")
"""

from __future__ import annotations

import contextlib
import errno
import functools
import io
import os
import secrets
import stat
import struct
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from .errors import NbxsigError, bad_type, bad_value

#: File extensions (lower case, with the dot) read as audio through soundfile.
AUDIO_EXTENSIONS: tuple[str, ...] = (".wav", ".flac", ".ogg", ".oga", ".aif", ".aiff", ".au", ".caf", ".w64")
#: Array files.
ARRAY_EXTENSIONS: tuple[str, ...] = (".npy", ".npz")
#: Image files read and written through Pillow.
IMAGE_EXTENSIONS: tuple[str, ...] = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")

#: soundfile format names by extension, used when writing through a temporary file (whose name has
#: no meaningful extension).
_AUDIO_FORMATS = {
    ".wav": "WAV",
    ".flac": "FLAC",
    ".ogg": "OGG",
    ".oga": "OGG",
    ".aif": "AIFF",
    ".aiff": "AIFF",
    ".au": "AU",
    ".caf": "CAF",
    ".w64": "W64",
}
_IMAGE_FORMATS = {
    ".png": "PNG",
    ".jpg": "JPEG",
    ".jpeg": "JPEG",
    ".bmp": "BMP",
    ".tif": "TIFF",
    ".tiff": "TIFF",
    ".webp": "WEBP",
}
_TEMP_MARK = ".tmp-"
#: The largest sample rate an audio file's header holds (libsndfile's 32-bit signed int).
_MAX_AUDIO_RATE = 2**31 - 1


class InputFileError(NbxsigError, ValueError):
    """An input file cannot be used: missing, empty, corrupt, of an unsupported type, or holding
    non-finite values. The message names the file and the reason."""


@dataclass
class Audio:
    """Decoded audio.

    Attributes:
        data: float32 samples of shape (channels, frames), full scale ±1 for PCM sources; or int16
            (full scale ±32768) when read with ``pcm16=True`` from a PCM_16 file (see :meth:`float32`).
        sample_rate: in Hz.
        subtype: the file's soundfile subtype ("PCM_16", "FLOAT", ...), or None for arrays.
    """

    data: np.ndarray
    sample_rate: int
    subtype: str | None = None
    #: True when ``sample_rate`` is an assumed default (an array file carries no rate).
    rate_assumed: bool = False

    @property
    def samples(self) -> int:
        """Frames per channel."""
        return int(self.data.shape[-1])

    def float32(self) -> np.ndarray:
        """The samples as float32 in ±1 (int16 data divided by 32768, exactly as soundfile does)."""
        if self.data.dtype == np.int16:
            return self.data.astype(np.float32) * np.float32(1.0 / 32768.0)
        return self.data


def kind_of(path: str | os.PathLike[str]) -> str:
    """``"audio"``, ``"array"``, ``"image"`` or ``"unknown"``, from the file's extension."""
    ext = Path(path).suffix.lower()
    if ext in AUDIO_EXTENSIONS:
        return "audio"
    if ext in ARRAY_EXTENSIONS:
        return "array"
    if ext in IMAGE_EXTENSIONS:
        return "image"
    return "unknown"


def as_path(path: Any) -> Path:
    """``path`` as a Path: a str, bytes (decoded as the file system does) or os.PathLike."""
    if isinstance(path, (str, bytes, os.PathLike)):
        return Path(os.fsdecode(path))
    raise bad_type("path", path, "a file name: str, bytes or os.PathLike")


def _check_readable(path: Path) -> None:
    if not path.exists():
        if path.is_symlink():
            try:
                os.stat(path)
            except OSError as exc:
                if exc.errno == errno.ELOOP:  # (exists() says False for a loop too)
                    raise InputFileError(f"{path}: a symbolic link loop (it never reaches a file)") from None
            raise InputFileError(f"{path}: no such file (a broken symbolic link to {os.readlink(path)})")
        raise InputFileError(f"{path}: no such file")
    if not path.is_file():
        raise InputFileError(f"{path}: not a regular file")
    if path.stat().st_size == 0:
        raise InputFileError(f"{path}: the file is empty (0 bytes)")


#: Data lengths a writer puts in a header when it cannot write the real one (its output was a pipe):
#: 0 and 0xFFFFFFFF (libsndfile, ffmpeg), 0x7FFFF000 (SoX's "unspecified"). Not checked.
_UNKNOWN_LENGTHS = frozenset({0, 0xFFFFFFFF, 0x7FFFF000})


def _check_not_truncated(path: Path) -> None:
    """Refuse a WAV, AIFF, AU or W64 file whose audio data is shorter than its header declares -- a
    copy or download cut short. libsndfile and the ``wave`` module read what is there and report the
    shorter length as the file's own, so without this a cut file would be processed as a short one."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(40)
        if head[:4] == b".snd" and len(head) >= 12:  # AU: data offset and size, big-endian
            offset, declared = struct.unpack(">II", head[4:12])
            _check_declared(path, declared, size - offset)
            return
        # Chunked formats: first chunk, chunk header bytes, its size field, whether the size counts the
        # header, alignment, the samples' chunk id (W64's ids are GUIDs whose first 4 bytes name them).
        if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
            first, header, size_field, with_header, align, data_id = 12, 8, "<I", False, 2, b"data"
        elif head[:4] == b"FORM" and head[8:12] in (b"AIFF", b"AIFC"):
            first, header, size_field, with_header, align, data_id = 12, 8, ">I", False, 2, b"SSND"
        elif head[:4] == b"riff" and head[24:28] == b"wave":  # Sony Wave64: 64-bit sizes
            first, header, size_field, with_header, align, data_id = 40, 24, "<Q", True, 8, b"data"
        else:
            return
        offset = first
        while offset + header <= size:  # walk the chunks up to the one that holds the samples
            f.seek(offset)
            chunk = f.read(header)
            (length,) = struct.unpack(size_field, chunk[header - struct.calcsize(size_field) :])
            body = max(length - header, 0) if with_header else length
            if chunk[:4] == data_id:
                _check_declared(path, body, size - offset - header)
                return
            offset += header + -(-body // align) * align  # chunks are padded to the alignment


def _check_declared(path: Path, declared: int, available: int) -> None:
    if declared not in _UNKNOWN_LENGTHS and declared > available:
        held = max(available, 0)
        message = f"the header declares {declared} bytes of audio, the file holds {held}"
        raise InputFileError(f"{path}: truncated: {message}")


def check_finite(path: str | os.PathLike[str], data: np.ndarray) -> np.ndarray:
    """Return ``data``; raise :class:`InputFileError` if it holds NaN or ±inf."""
    if np.issubdtype(data.dtype, np.inexact) and not np.isfinite(data).all():
        bad = int(np.size(data) - np.count_nonzero(np.isfinite(data)))
        raise InputFileError(f"{path}: {bad} of {data.size} values are not finite (NaN or inf)")
    return data


def read_audio(
    path: str | bytes | os.PathLike[str], *, allow_empty: bool = False, pcm16: bool = False
) -> Audio:
    """Decode an audio file to float32 ``(channels, frames)``.

    Args:
        path: a file soundfile can read (see :data:`AUDIO_EXTENSIONS`): str, bytes or os.PathLike.
        allow_empty: accept a file with zero frames (refused by default: nothing to process).
        pcm16: keep PCM_16 samples as int16 (half the bytes to move between processes; convert
            with :meth:`Audio.float32` or on the device). Other subtypes are float32 regardless.

    Returns:
        :class:`Audio`.

    Raises:
        InputFileError: missing, empty, corrupt, truncated (WAV, AIFF, AU, W64: less data than
        the header declares) or unsupported file; zero frames; non-finite samples (possible in
        FLOAT/DOUBLE files).
        ParameterTypeError: ``path`` is not a str, bytes or os.PathLike.
    """
    path = as_path(path)
    _check_readable(path)
    _check_not_truncated(path)
    soundfile = _soundfile()
    if soundfile is None:
        data, rate, subtype = _read_wav_stdlib(path, pcm16=pcm16)
    else:
        try:
            # Bytes, not str: soundfile encodes a str name as UTF-8, which a name that is not
            # (undecodable bytes, held by Python as surrogates) cannot be.
            with soundfile.SoundFile(os.fsencode(path)) as f:
                dtype = "int16" if pcm16 and f.subtype == "PCM_16" else "float32"
                data = f.read(dtype=dtype, always_2d=True).T
                rate, subtype = int(f.samplerate), f.subtype
        except (RuntimeError, soundfile.LibsndfileError, ValueError) as exc:
            raise InputFileError(f"{path}: cannot decode as audio ({_libsndfile_reason(exc)})") from None
    if data.shape[-1] == 0 and not allow_empty:
        raise InputFileError(f"{path}: the audio has zero frames")
    return Audio(check_finite(path, np.ascontiguousarray(data)), rate, subtype)


def _soundfile() -> Any:
    """The soundfile module, or None where it is not installed (the GPU machine's image)."""
    try:
        import soundfile
    except ImportError:
        return None
    return soundfile


def _read_wav_stdlib(path: Path, *, pcm16: bool = False) -> tuple[np.ndarray, int, str]:
    """Integer-PCM WAV through the standard library, for machines without soundfile."""
    import wave

    try:
        with wave.open(str(path), "rb") as w:
            width, channels, rate = w.getsampwidth(), w.getnchannels(), w.getframerate()
            raw = w.readframes(w.getnframes())
    except (wave.Error, EOFError, OSError) as exc:
        hint = "" if path.suffix.lower() == ".wav" else "; install soundfile for this format"
        raise InputFileError(f"{path}: cannot decode as audio ({_short(exc)}{hint})") from None
    if width == 1:
        data = (np.frombuffer(raw, np.uint8).astype(np.float32) - 128.0) / 128.0
    elif width == 3:
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        data = ((b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)) << 8 >> 8).astype(np.float32) / 2.0**23
    elif width == 2 and pcm16:
        data = np.frombuffer(raw, "<i2")
    else:
        dtype = {2: np.int16, 4: np.int32}[width]
        data = np.frombuffer(raw, dtype).astype(np.float32) / float(2 ** (8 * width - 1))
    return data.reshape(-1, channels).T, int(rate), f"PCM_{8 * width if width > 1 else 'U8'}"


def audio_info(path: str | bytes | os.PathLike[str]) -> dict[str, Any]:
    """Header facts of an audio file without decoding it: sample_rate, channels, frames, duration (s),
    format, subtype.

    Raises:
        InputFileError: missing, empty, corrupt, truncated or unsupported file.
        ParameterTypeError: ``path`` is not a str, bytes or os.PathLike.
    """
    path = as_path(path)
    _check_readable(path)
    _check_not_truncated(path)
    soundfile = _soundfile()
    if soundfile is None:
        data, rate, subtype = _read_wav_stdlib(path)
        channels, frames, fmt = data.shape[0], data.shape[1], "WAV"
    else:
        try:
            info = soundfile.info(os.fsencode(path))  # bytes: see read_audio
        except (RuntimeError, soundfile.LibsndfileError, ValueError) as exc:
            raise InputFileError(f"{path}: cannot decode as audio ({_libsndfile_reason(exc)})") from None
        rate, channels, frames = int(info.samplerate), int(info.channels), int(info.frames)
        fmt, subtype = info.format, info.subtype
    return {
        "sample_rate": rate,
        "channels": channels,
        "frames": frames,
        "duration": frames / rate if rate else 0.0,
        "format": fmt,
        "subtype": subtype,
    }


def read_array(path: str | os.PathLike[str]) -> np.ndarray | dict[str, np.ndarray]:
    """Load a ``.npy`` (an array) or ``.npz`` (a dict of arrays). Pickled objects are refused.

    Raises:
        InputFileError: missing, empty, corrupt file, or an object array.
    """
    path = Path(path)
    _check_readable(path)
    try:
        with open(path, "rb") as f:
            magic = f.read(6)
    except OSError as exc:  # e.g. no read permission
        raise InputFileError(f"{path}: cannot load as a NumPy array ({_short(exc)})") from None
    if magic != b"\x93NUMPY" and not magic.startswith(b"PK"):
        # np.load takes any other file for a pickle, and said that a WAV or a text file "contains
        # pickled (object) data" that could be loaded "unsafely" with allow_pickle.
        raise InputFileError(f"{path}: not a NumPy .npy or .npz file (it starts with neither's signature)")
    try:
        loaded = np.load(str(path), allow_pickle=False)
        if isinstance(loaded, np.lib.npyio.NpzFile):
            with loaded:
                return {k: loaded[k] for k in loaded.files}
        return loaded
    except (ValueError, OSError, EOFError) as exc:
        raise InputFileError(f"{path}: cannot load as a NumPy array ({_short(exc)})") from None
    except Exception as exc:  # zipfile.BadZipFile and friends from a damaged .npz
        raise InputFileError(f"{path}: cannot load as a NumPy array ({_short(exc)})") from None


def read_image(path: str | os.PathLike[str]) -> np.ndarray:
    """Decode an image to float32 ``(channels, height, width)`` in [0, 1] (grayscale → 1 channel,
    RGB(A) → 3 (4) channels; palette images are converted to RGB(A)).

    Raises:
        InputFileError: missing, empty, corrupt or unsupported file.
    """
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    _check_readable(path)
    try:
        with Image.open(path) as img:
            img.load()
            if img.mode not in ("L", "RGB", "RGBA", "I;16", "I", "F"):
                img = img.convert("RGBA" if "A" in img.getbands() or img.mode == "P" else "RGB")
            arr = np.asarray(img)
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise InputFileError(f"{path}: cannot decode as an image ({_short(exc)})") from None
    if arr.dtype == np.uint8:
        out = arr.astype(np.float32) / 255.0
    elif arr.dtype in (np.uint16, np.int32) or img.mode.startswith("I"):
        out = arr.astype(np.float32) / 65535.0
    else:
        out = arr.astype(np.float32)
    out = out[None] if out.ndim == 2 else np.moveaxis(out, -1, 0)
    return check_finite(path, np.ascontiguousarray(out))


def read_signal(path: str | bytes | os.PathLike[str], *, default_rate: int, pcm16: bool = False) -> Audio:
    """Read a waveform from an audio file or a real ``.npy`` array of shape ``(L,)``, ``(C, L)``
    or ``(..., L)`` (leading dimensions become channels).

    Args:
        path: the file: str, bytes or os.PathLike.
        default_rate: the sample rate (Hz) assumed for arrays, which carry none.
        pcm16: see :func:`read_audio`.

    Returns:
        :class:`Audio` with float32 data ``(channels, frames)``; ``rate_assumed`` is True for arrays.

    Raises:
        InputFileError: unreadable, unsupported (``.npz``, images, ...), empty, complex or
        non-finite input, or float64 values beyond float32's range.
        ParameterTypeError: ``path`` is not a str, bytes or os.PathLike.
    """
    path = as_path(path)
    kind = kind_of(path)
    if kind == "audio":
        return read_audio(path, pcm16=pcm16)
    _check_readable(path)  # a missing file is missing, whatever its name
    if path.suffix.lower() != ".npy":
        raise InputFileError(f"{path}: unsupported input type (expected audio or a .npy waveform)")
    arr = read_array(path)
    if not isinstance(arr, np.ndarray):
        # np.load goes by the content, not the name: an .npz archive renamed .npy (or saved under that
        # name) loads as several arrays. Said in words, not as the bare AssertionError a check here gave.
        raise InputFileError(f"{path}: an .npz archive of {len(arr)} array(s), not a .npy waveform")
    if np.iscomplexobj(arr) or not (
        np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
    ):
        raise InputFileError(f"{path}: a waveform must be a real array, got dtype {arr.dtype}")
    if arr.ndim == 0:
        raise InputFileError(f"{path}: a waveform must be an array of samples, got a single value (shape ())")
    if arr.size == 0:
        raise InputFileError(f"{path}: the array is empty (shape {arr.shape})")
    check_finite(path, arr)
    if np.issubdtype(arr.dtype, np.floating) and arr.dtype.itemsize > 4:
        # float64 beyond float32's range would become inf in the conversion: say so, not "not finite".
        peak = float(np.abs(arr).max())
        if peak > float(np.finfo(np.float32).max):
            raise InputFileError(f"{path}: values exceed the float32 range (peak magnitude {peak:.3g})")
    data = arr.astype(np.float32).reshape(-1, arr.shape[-1])
    return Audio(np.ascontiguousarray(data), int(default_rate), None, rate_assumed=True)


# --------------------------------------------------------------------------------------------
# Atomic writes


def temp_sibling(path: str | os.PathLike[str]) -> Path:
    """A fresh hidden temporary name beside ``path``: ``.NAME.tmp-PID-RANDOM``."""
    path = Path(path)
    return path.with_name(f".{path.name}{_TEMP_MARK}{os.getpid()}-{secrets.token_hex(4)}")


def is_temp_name(name: str) -> bool:
    """Whether a file name is one of :func:`temp_sibling`'s."""
    return name.startswith(".") and _TEMP_MARK in name


def remove_stale_temps(path: str | os.PathLike[str]) -> int:
    """Delete temporaries of ``path`` left by a killed writer; return how many were removed."""
    path = Path(path)
    removed = 0
    with contextlib.suppress(OSError):
        for p in path.parent.glob(f".{_glob_escape(path.name)}{_TEMP_MARK}*"):
            with contextlib.suppress(OSError):
                p.unlink()
                removed += 1
    return removed


def remove_stale_temps_of(paths: Iterable[str | os.PathLike[str]]) -> int:
    """:func:`remove_stale_temps` for many destinations, listing each folder once (not once per
    destination, which costs a listing of the whole folder per file); returns how many were removed.
    Only temporaries of the given destinations go: another process writing other outputs into the
    same folder (``--shard``) keeps its own."""
    wanted: dict[Path, set[str]] = {}
    for p in paths:
        p = Path(p)
        wanted.setdefault(p.parent, set()).add(p.name)
    removed = 0
    for folder, names in wanted.items():
        with contextlib.suppress(OSError), os.scandir(folder) as entries:
            for entry in entries:
                if is_temp_name(entry.name) and entry.name[1:].rpartition(_TEMP_MARK)[0] in names:
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)
                        removed += 1
    return removed


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], *, make_parents: bool = True) -> Iterator[IO[bytes]]:
    """Open a binary file object whose contents replace ``path`` atomically when the block ends
    without an exception; on an exception (or KeyboardInterrupt/SystemExit) the temporary is deleted
    and ``path`` is untouched.

    A file that is replaced keeps its permission bits (a private 0600 file stays private). A symbolic
    link is followed, as ``cp`` and editors do: its target is replaced and the link stays (a dangling
    link's target is created).

    Raises:
        OSError: the folder cannot be created or written (e.g. a parent is a regular file).
    """
    path = Path(path)
    if path.is_symlink():
        # Renaming over the link would replace the link itself and leave its target unwritten.
        path = Path(os.path.realpath(path))
    tmp = temp_sibling(path)
    try:
        f = open(tmp, "xb")  # noqa: SIM115 - closed below, before the rename
    except FileNotFoundError:
        if not make_parents:
            raise
        # Only now: a batch writes thousands of files into folders that exist after the first.
        path.parent.mkdir(parents=True, exist_ok=True)
        f = open(tmp, "xb")  # noqa: SIM115
    try:
        yield f
        f.flush()
        with contextlib.suppress(FileNotFoundError):
            # The temporary was made with the umask's default mode; the rename would impose it.
            os.chmod(tmp, stat.S_IMODE(os.stat(path).st_mode))
        if _fsync_enabled():
            os.fsync(f.fileno())
        f.close()
        os.replace(tmp, path)
    except BaseException:
        f.close()
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _fsync_enabled() -> bool:
    # Read at each write (not at import): NBXSIG_FSYNC=0 trades durability against a power loss or OS
    # crash for speed; the rename still guarantees that a killed process leaves no partial output.
    return os.environ.get("NBXSIG_FSYNC", "1").strip().lower() not in ("0", "false", "no", "off")


def can_write_audio(extension: str, subtype: str | None = None) -> bool:
    """Whether :func:`write_audio` writes files with this extension (e.g. ``".flac"``) and, when
    given, this subtype (FLAC holds no FLOAT, OGG no PCM). False where soundfile is not installed."""
    soundfile = _soundfile()
    fmt = _AUDIO_FORMATS.get(extension.lower())
    return (
        soundfile is not None
        and fmt is not None
        and (subtype is None or soundfile.check_format(fmt, subtype))
    )


def write_audio(
    path: str | os.PathLike[str], data: Any, sample_rate: int, *, subtype: str | None = None
) -> None:
    """Write ``(channels, frames)`` samples atomically. The format follows the extension; ``subtype``
    None is soundfile's default for the format (PCM_16 for WAV/FLAC).

    ``data`` is floating (full scale ±1; clipped there unless the subtype is FLOAT/DOUBLE) or integer
    (full scale of its dtype, e.g. int16 ±32768, as soundfile writes it), ``(frames,)`` or
    ``(channels, frames)``, finite.

    Raises:
        InputFileError: ``subtype`` is not valid for the format (e.g. FLOAT in FLAC).
        ParameterValueError / ParameterTypeError: ``sample_rate`` not a positive integer (or above
        2**31 - 1); ``data`` not 1-D/2-D real numbers, or not finite.
        OSError: the destination cannot be written.
    """
    import soundfile

    path = Path(path)
    fmt = _AUDIO_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise InputFileError(f"{path}: cannot write audio with extension {path.suffix!r}")
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, (int, np.integer)) or sample_rate < 1:
        raise bad_value("sample_rate", sample_rate, "a positive integer rate in Hz")
    if sample_rate > _MAX_AUDIO_RATE:  # libsndfile's C int: soundfile said "does not fit 'int'"
        raise bad_value("sample_rate", sample_rate, f"at most {_MAX_AUDIO_RATE} Hz (what audio files hold)")
    arr = _numpy(data)
    if arr.dtype.kind not in "fiu" or arr.ndim not in (1, 2):
        raise bad_type("data", arr, "real samples, (frames,) or (channels, frames)")
    arr = arr[None] if arr.ndim == 1 else arr
    if subtype is not None and not soundfile.check_format(fmt, subtype):
        raise InputFileError(f"{path}: subtype {subtype!r} cannot be written in {fmt} files")
    if arr.dtype.kind == "f":
        if not np.isfinite(arr).all():
            raise bad_value("data", arr, "finite samples (NaN/inf would be written as full-scale clicks)")
        if subtype is None or subtype.upper() not in ("FLOAT", "DOUBLE"):
            # Integer and compressed codecs: clip rather than let libsndfile wrap samples around.
            arr = np.clip(arr, -1.0, 1.0)
    with atomic_open(path) as f:
        soundfile.write(f, np.ascontiguousarray(arr.T), int(sample_rate), subtype=subtype, format=fmt)


def write_npy(path: str | os.PathLike[str], data: Any) -> None:
    """Save one array as ``.npy``, atomically (the bytes of ``np.save``).

    Raises:
        ParameterTypeError: ``data`` is an object array (it would need pickling).
    """
    arr = _unpickled("data", data)
    if not arr.flags.c_contiguous or arr.dtype.hasobject or arr.dtype.fields is not None:
        with atomic_open(path) as f:
            np.save(f, arr, allow_pickle=False)
        return
    # The common case in few Python steps: a batch writes thousands of these from writer threads
    # that share one GIL, which os.write releases for the data (np.save's file handling does not).
    header = _npy_header(arr.shape, np.lib.format.dtype_to_descr(arr.dtype))
    with atomic_open(path) as f:
        fd = f.fileno()
        for chunk in (header, memoryview(arr.reshape(-1).view(np.uint8))):
            while chunk:
                chunk = chunk[os.write(fd, chunk) :]


@functools.lru_cache(maxsize=256)
def _npy_header(shape: tuple[int, ...], descr: str) -> memoryview:
    """The .npy (version 1.0) header np.save writes for a C-ordered array (cached: a batch's files
    mostly share shapes)."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": descr, "fortran_order": False, "shape": shape})
    return memoryview(buffer.getvalue())


def write_npz(path: str | os.PathLike[str], arrays: Mapping[str, Any]) -> None:
    """Save a dict of arrays (and scalars/strings, stored as 0-d arrays) as ``.npz``, atomically: the
    file ``np.savez`` writes, readable by :func:`read_array`.

    Raises:
        ParameterTypeError: ``arrays`` is not a mapping, a key is not a str, or a value is an object
        array (it would need pickling, which :func:`read_array` refuses to undo).
    """
    if not isinstance(arrays, Mapping):
        raise bad_type("arrays", arrays, "a mapping of names to arrays")
    members = {}
    for key, value in arrays.items():
        if not isinstance(key, str):
            raise bad_type("arrays' keys", key, "str")
        members[key] = _unpickled(f"arrays[{key!r}]", value)
    # Written member by member, as np.savez does inside: np.savez(f, **arrays) would take a key named
    # "file" for its own first parameter.
    with atomic_open(path) as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        for key, arr in members.items():
            with zf.open(key + ".npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, arr, allow_pickle=False)


def write_image(path: str | os.PathLike[str], data: Any) -> None:
    """Save float ``(channels, height, width)`` (1, 3 or 4 channels) or ``(height, width)`` in [0, 1]
    as an 8-bit image, atomically; the format follows the extension. Values are clipped to [0, 1].

    The layout is always channels first, as :func:`read_image` returns it: ``(H, W, C)`` data is
    refused by its channel count, except where ``H`` is itself 1, 3 or 4, which reads as a valid
    ``(C, H, W)`` (transpose such data with ``np.moveaxis(data, -1, 0)``).

    Raises:
        InputFileError: the extension is not an image format.
        ParameterTypeError: ``data`` is not real numbers.
        ParameterValueError: ``data`` is not 2-D/3-D with 1, 3 or 4 channels, is empty, or holds NaN/inf.
    """
    from PIL import Image

    path = Path(path)
    fmt = _IMAGE_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise InputFileError(f"{path}: cannot write an image with extension {path.suffix!r}")
    arr = _numpy(data)
    if arr.dtype.kind not in "biuf":  # complex would lose its imaginary part in the uint8 cast
        raise bad_type("data", arr, "real numbers in [0, 1]")
    if arr.ndim not in (2, 3) or (arr.ndim == 3 and arr.shape[0] not in (1, 3, 4)):
        raise bad_value("data", arr, "(height, width) or (channels, height, width) with 1, 3 or 4 channels")
    if arr.size == 0:
        raise bad_value("data", arr, "an image of at least one pixel")
    if not np.isfinite(arr).all():
        raise bad_value("data", arr, "finite values (NaN would be written as black)")
    if arr.ndim == 3:
        arr = arr[0] if arr.shape[0] == 1 else np.moveaxis(arr, 0, -1)
    if fmt == "JPEG" and arr.ndim == 3 and arr.shape[-1] == 4:
        arr = arr[..., :3]  # JPEG has no alpha channel
    img = Image.fromarray(np.round(np.clip(arr, 0.0, 1.0) * 255.0).astype(np.uint8))
    with atomic_open(path) as f:
        img.save(f, format=fmt)


def save_figure(path: str | os.PathLike[str], figure: Any, **kwargs: Any) -> None:
    """Save a matplotlib figure atomically (format from the extension)."""
    path = Path(path)
    with atomic_open(path) as f:
        figure.savefig(f, format=path.suffix.lstrip(".").lower() or "png", **kwargs)


def _unpickled(name: str, data: Any) -> np.ndarray:
    """``data`` as an array that can be saved without pickling."""
    arr = _numpy(data)
    if arr.dtype.hasobject:
        raise bad_type(
            name, arr, "numbers, bools or strings (object arrays are not saved: loading needs pickle)"
        )
    return arr


def _numpy(data: Any) -> np.ndarray:
    if hasattr(data, "detach"):  # a torch tensor; torch is not imported here
        data = data.detach().cpu().numpy()
    return np.asarray(data)


def _glob_escape(name: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def _libsndfile_reason(exc: BaseException) -> str:
    """libsndfile's reason alone: soundfile's message starts ``Error opening b'NAME': ``, the name as
    the bytes we opened it by (see :func:`read_audio`), which repeats the file the message names
    already, as a Python bytes literal."""
    reason = getattr(exc, "error_string", None)  # soundfile.LibsndfileError's own words
    return reason.strip() if isinstance(reason, str) and reason.strip() else _short(exc)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[-1] if text else type(exc).__name__
