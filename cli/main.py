"""``nbxsig``: batch signal processing from the shell. Thin commands over the functional core."""

from __future__ import annotations

import click

from nbxsig import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nbxsig")
def main() -> None:
    """GPU signal and vision processing: STFT/iSTFT, mel features, filters, resampling."""


if __name__ == "__main__":
    main()
