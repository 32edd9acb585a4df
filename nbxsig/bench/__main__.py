"""``python -m nbxsig.bench [SUITE ...] [--quick] [--markdown FILE]`` (also ``nbxsig bench``)."""

from __future__ import annotations

import argparse
import importlib
import sys

from . import SUITES

_MARKDOWN_TITLE = """# Benchmarks

Written by `make bench` (`python -m nbxsig.bench all --markdown FILE`). Each table gives nbxsig's median
time, the torch/torchaudio baseline measured in the same process, the ratio, GB/s from the fewest bytes
the op must move, that as a fraction of a device-to-device copy measured in the same run, peak extra
device memory beyond the output, and the relative error against the baseline.

"""


def run(suites: list[str], *, quick: bool = False, markdown: str | None = None) -> str:
    """Run the named suites on the current CUDA device and return the report (Markdown)."""
    import torch

    from ._harness import Environment, copy_bandwidth_gbps, format_environment, format_table, measure

    if not torch.cuda.is_available():
        raise SystemExit("nbxsig bench needs a CUDA device: torch sees none")
    names = list(SUITES) if "all" in suites else suites
    unknown = [s for s in names if s not in SUITES]
    if unknown:
        raise SystemExit(f"unknown suite(s) {unknown}; choose from {sorted(SUITES)} or 'all'")
    device = torch.device("cuda")
    copy_gbps = copy_bandwidth_gbps(device)
    env = Environment.capture(device, copy_gbps)
    sections = [f"Environment: {format_environment(env)}"]
    for name in names:
        module = importlib.import_module(SUITES[name])
        results = [measure(case, device=device, copy_gbps=copy_gbps) for case in module.cases(quick=quick)]
        sections.append(f"### {name}\n\n{format_table(results)}")
        print(sections[-1], flush=True)
    report = "\n\n".join(sections) + "\n"
    if markdown:
        with open(markdown, "w", encoding="utf-8") as f:
            f.write(_MARKDOWN_TITLE + report)
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m nbxsig.bench", description=__doc__)
    parser.add_argument("suites", nargs="*", default=["all"], help=f"any of {sorted(SUITES)} or 'all'")
    parser.add_argument("--quick", action="store_true", help="fewer and smaller cases")
    parser.add_argument("--markdown", help="also write the report to this file")
    args = parser.parse_args(argv)
    print(run(args.suites, quick=args.quick, markdown=args.markdown).splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
