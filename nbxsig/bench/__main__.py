"""``python -m nbxsig.bench [SUITE ...] [--quick] [--match TEXT] [--markdown FILE]`` (or ``nbxsig bench``)."""

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


def run(
    suites: list[str], *, quick: bool = False, markdown: str | None = None, match: str | None = None
) -> str:
    """Run the named suites on the current CUDA device and return the report (Markdown); ``match``:
    only the cases whose name contains it (e.g. "istft forward+backward")."""
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
    failed = []
    for name in names:
        module = importlib.import_module(SUITES[name])
        results = []
        for case in module.cases(quick=quick):
            if match is not None and match not in case.name:
                continue
            # Each row is printed as it is measured, so a run stopped by a time limit keeps what it got;
            # a case that raises is reported and the suite goes on.
            try:
                results.append(measure(case, device=device, copy_gbps=copy_gbps))
            except Exception as exc:  # reported below, and the exit status says so
                failed.append(f"{name}: {case.name}: {type(exc).__name__}: {exc}")
                print(f"FAILED {failed[-1]}", flush=True)
                continue
            print(format_table(results[-1:]).splitlines()[-1], flush=True)
        sections.append(f"### {name}\n\n{format_table(results)}")
        print(sections[-1], flush=True)
    if failed:
        sections.append("Failed cases:\n\n" + "\n".join(f"- {f}" for f in failed))
    report = "\n\n".join(sections) + "\n"
    if markdown:
        with open(markdown, "w", encoding="utf-8") as f:
            f.write(_MARKDOWN_TITLE + report)
    if failed:
        print(report, flush=True)
        raise SystemExit(f"{len(failed)} benchmark case(s) failed")
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m nbxsig.bench", description=__doc__)
    parser.add_argument("suites", nargs="*", default=["all"], help=f"any of {sorted(SUITES)} or 'all'")
    parser.add_argument("--quick", action="store_true", help="fewer and smaller cases")
    parser.add_argument("--match", help="only the cases whose name contains this text")
    parser.add_argument("--markdown", help="also write the report to this file")
    args = parser.parse_args(argv)
    print(run(args.suites, quick=args.quick, markdown=args.markdown, match=args.match).splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
