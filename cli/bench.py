"""``nbxsig bench``: the benchmark tables (needs a CUDA device)."""

from __future__ import annotations

import click


@click.command()
@click.argument("suites", nargs=-1, metavar="[SUITE]...")
@click.option("--quick", is_flag=True, help="Fewer and smaller cases.")
@click.option("--markdown", metavar="FILE", help="Also write the report to this Markdown file.")
@click.option("--match", metavar="TEXT", help="Only the cases whose name contains TEXT.")
def bench(suites: tuple[str, ...], quick: bool, markdown: str | None, match: str | None) -> None:
    """Run benchmark suites (default: all) on the CUDA device and print their tables
    (the same as `python -m nbxsig.bench`)."""
    from nbxsig.bench import SUITES
    from nbxsig.bench.__main__ import run

    unknown = [s for s in suites if s != "all" and s not in SUITES]
    if unknown:
        raise click.BadParameter(
            f"unknown suite(s) {', '.join(unknown)}; choose from {', '.join(sorted(SUITES))} or all",
            param_hint="SUITE",
        )
    run(list(suites) or ["all"], quick=quick, markdown=markdown, match=match)
