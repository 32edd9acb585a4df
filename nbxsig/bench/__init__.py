"""Benchmarks: ``python -m nbxsig.bench SUITE`` or ``nbxsig bench SUITE``.

Each suite module defines ``cases(quick: bool) -> list[Case]``; the harness times nbxsig and the
torch/torchaudio baseline in the same process with ``triton.testing.do_bench`` (median), and
reports the ratio, GB/s and the fraction of a device-to-device copy measured in the same run.
"""

SUITES = {
    "core": "nbxsig.bench.core",
    "spectral": "nbxsig.bench.spectral",
    "features": "nbxsig.bench.features",
    "filters": "nbxsig.bench.filters",
}
