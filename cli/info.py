"""``nbxsig info``: what a file holds."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import click

from nbxsig import batch
from nbxsig import io as nio

from ._common import Notice, caught_warnings


def describe(path: Path) -> dict[str, Any]:
    """Facts about one file (audio header, array shapes and dtypes, image size).

    Raises:
        InputFileError: unreadable or unsupported file.
    """
    kind = nio.kind_of(path)
    row: dict[str, Any] = {"path": str(path), "kind": kind}
    if kind == "audio":
        row.update(nio.audio_info(path))
    elif kind == "array":
        loaded = nio.read_array(path)
        arrays = loaded if isinstance(loaded, dict) else {"": loaded}
        row["arrays"] = {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in arrays.items()}
        if isinstance(loaded, dict):
            for key in ("sample_rate", "n_fft", "hop_length", "win_length", "length"):
                if key in loaded and loaded[key].ndim == 0:
                    row[key] = _plain(loaded[key].item())
    elif kind == "image":
        from PIL import Image

        nio._check_readable(path)
        # What nbxsig.io.read_image catches (a PNG's oversized text chunk is a ValueError), and PIL's
        # refusal of too large an image: the file fails, with no traceback.
        try:
            with Image.open(path) as img:
                row.update(width=img.width, height=img.height, mode=img.mode, format=img.format)
        except (OSError, ValueError, Image.DecompressionBombError) as exc:
            raise nio.InputFileError(f"{path}: cannot decode as an image ({exc})") from None
    else:
        nio._check_readable(path)
        raise nio.InputFileError(f"{path}: unsupported file type {path.suffix or '(no extension)'!r}")
    return row


def _plain(value: Any) -> Any:
    """A parameter as JSON holds it: a number, string or bool as is, anything else -- complex, bytes,
    a date, NaN or inf (which JSON has no word for) -- as its text, so that ``--json`` always prints
    valid JSON (another tool's .npz may hold anything under these keys)."""
    if isinstance(value, (bool, int, str)) or (isinstance(value, float) and math.isfinite(value)):
        return value
    return str(value)


def _text(row: dict[str, Any]) -> str:
    # A name that is not valid in the locale's encoding (undecodable bytes) is shown with
    # replacement characters: printed as is, it would stop the listing with a UnicodeEncodeError.
    path = click.format_filename(row["path"])
    if row["kind"] == "audio":
        return (
            f"{path}: audio {row['format']} {row['subtype']}, {row['sample_rate']} Hz, "
            f"{row['channels']} ch, {row['frames']} frames, {row['duration']:.3f} s"
        )
    if row["kind"] == "array":
        parts = [
            f"{name + ' ' if name else ''}{v['dtype']} {tuple(v['shape'])}"
            for name, v in row["arrays"].items()
            if v["shape"] or not name  # an .npz's scalars are its parameters, shown below
        ]
        keys = ("sample_rate", "n_fft", "hop_length", "win_length", "length")
        params = ", ".join(f"{k} {row[k]}" for k in keys if k in row)
        return f"{path}: array {'; '.join(parts)}" + (f" ({params})" if params else "")
    return f"{path}: image {row['format']} {row['mode']}, {row['width']}×{row['height']}"


@click.command()
@click.argument("inputs", nargs=-1, required=True, metavar="INPUT...")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per file.")
@click.option("--glob", metavar="PATTERN", help="Select files in folders by this pattern.")
def info(inputs: tuple[str, ...], as_json: bool, glob: str | None) -> None:
    """Print sample rate, channels, duration and subtype of audio files, shape and dtype of
    arrays, size of images. Folders are searched recursively; @list.txt reads a list."""
    extensions = nio.AUDIO_EXTENSIONS + nio.ARRAY_EXTENSIONS + nio.IMAGE_EXTENSIONS
    try:
        found = batch.discover(inputs, extensions=extensions, glob=glob)
    except batch.BatchUsageError as exc:
        raise click.UsageError(str(exc)) from None
    failed = 0
    notice = Notice()
    for f in found:
        try:
            # Warnings about a file (PIL's DecompressionBombWarning...) are said as the CLI's own lines
            # naming it, and kept in its --json object.
            with caught_warnings() as texts:
                row = describe(f.path)
        except (nio.InputFileError, OSError, Warning) as exc:  # a warning: run with -W error
            failed += 1
            error = str(exc) if str(f.path) in str(exc) else f"{f.path}: {exc}"
            click.echo(f"nbxsig: failed: {error}", err=True)
            if as_json:
                click.echo(json.dumps({"path": str(f.path), "error": error}))
            continue
        for text in texts:
            notice.warning(str(f.path), text, key=(f.path, text))
        if texts:
            row["warnings"] = texts
        click.echo(json.dumps(row) if as_json else _text(row))
    if failed:
        sys.exit(1)
