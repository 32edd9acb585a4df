# ruff: noqa -- probe behind docs/benchmarks.md (run on the GPU machine: python3 docs/probes/stream.py OUTDIR)
import sys, torch
from nbxsig.bench import features as Fb
from nbxsig.bench._harness import measure, copy_bandwidth_gbps, format_table

dev = torch.device("cuda")
copy = copy_bandwidth_gbps(dev)
cases = Fb._streaming_cases(dev, torch.Generator().manual_seed(0))
with open(f"{sys.argv[1]}/stream.md", "w") as f:
    for rep in range(3):
        for c in cases:
            line = format_table([measure(c, device=dev, copy_gbps=copy)]).splitlines()[-1]
            print(line, flush=True)
            print(line, file=f, flush=True)
