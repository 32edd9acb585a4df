# ruff: noqa -- probe behind docs/benchmarks.md: a torch call's eager host time and wall latency as a process grows (python3 docs/probes/hostvar.py)
import sys, time, statistics, torch
import torch.nn.functional as F
from nbxsig.bench._harness import latency_us, time_us

dev = torch.device("cuda")
x = torch.randn(1, 4096, device=dev, dtype=torch.bfloat16)
w = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
q = torch.randn(1, 32, 1, 128, device=dev, dtype=torch.float16)
k = torch.randn(1, 8, 4096, 128, device=dev, dtype=torch.float16)


def host_us(fn, n=2000):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    [fn() for _ in range(n)]
    h = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return h


def report(stage):
    lin = lambda: F.linear(x, w)
    sdpa = lambda: F.scaled_dot_product_attention(q, k, k, enable_gqa=True)
    print(
        f"{stage}: F.linear host {host_us(lin):.1f} µs, events {time_us(lin):.1f}, latency {latency_us(lin, device=dev):.1f}; "
        f"SDPA host {host_us(sdpa):.1f}, events {time_us(sdpa):.1f}, latency {latency_us(sdpa, device=dev):.1f}",
        flush=True,
    )


report("fresh")
g = torch.Generator().manual_seed(0)
big = torch.randn(11008, 4096, generator=g).to(dev)
report("after a CPU randn 11008x4096 -> cuda")
del big
from nbxsig.bench import quant as Q

cases = Q._gemv_cases(False, dev)
report("after building the GEMV cases")
cases += Q._attention_cases(False, dev)
report("after building the attention cases")
import gc

gc.collect()
gc.freeze()
report("after gc.freeze()")
torch.set_num_threads(1)
report("after torch.set_num_threads(1)")
