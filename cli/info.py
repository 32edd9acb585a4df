"""``nbxsig info``: what a file holds."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from nbxsig import batch
from nbxsig import io as nio


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
                    row[key] = loaded[key].item()
    elif kind == "image":
        from PIL import Image

        nio._check_readable(path)
        try:
            with Image.open(path) as img:
                row.update(width=img.width, height=img.height, mode=img.mode, format=img.format)
        except OSError as exc:
            raise nio.InputFileError(f"{path}: cannot decode as an image ({exc})") from None
    else:
        nio._check_readable(path)
        raise nio.InputFileError(f"{path}: unsupported file type {path.suffix or '(no extension)'!r}")
    return row


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
    for f in found:
        try:
            row = describe(f.path)
        except (nio.InputFileError, OSError) as exc:
            failed += 1
            click.echo(f"nbxsig: failed: {exc}", err=True)
            if as_json:
                click.echo(json.dumps({"path": str(f.path), "error": str(exc)}))
            continue
        click.echo(json.dumps(row) if as_json else _text(row))
    if failed:
        sys.exit(1)
