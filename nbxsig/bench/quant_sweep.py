"""Config sweep of decode attention, the int4 GEMV and GEMM (a tuning tool, not a ``nbxsig bench`` suite).

``python -m nbxsig.bench.quant_sweep [--jobs 12] [--compile-only] [--markdown FILE]`` on a GPU: compiles
every candidate in parallel worker processes (Triton's on-disk cache is shared, so the timing process
then only loads them), then times each one as the ``quant`` suite's "back to back in one CUDA graph"
rows do: one graph of several calls over operand copies that together exceed L2, time per call, torch's
baseline (SDPA / tinygemm) in the same process. Rows: the default config and split, tile and stage
variants, each with its relative error against a float64 reference (GEMV: on the dequantized weight; its
default also with the capture counter arena off, ``_splitsum.CAPTURE_ARENA``, one memset node per call).
Attention rows also set decode attention's launch switches (``Q_IN_LOOP``, ``PDL``; letters q, p in the
label force one on, Q, P off, "-" for the defaults), GEMV rows the GEMV's ``PDL`` and ``PREFETCH`` (p / P,
f / F; a digit sets ``PREFETCH_STEPS``); attention rows say whether a default-config row gave the first
row's bits, GEMV rows whether each gave its config's oracle's bits; each attention shape's first row is
timed again at its end to show drift. GEMM rows time the dequant-GEMM (``int4_gemm``, 256 rows of float16:
the streaming SeqModel step's linears) against dequantize + ``F.linear`` in the same process, with the
dense float16 ``F.linear`` alongside, and say whether a repeat call gave the same bits. Each row is printed
as it is measured, so a time limit loses only the rows after it. ``--only attn|gemv|gemm`` limits the
sweep to one kernel, ``--shapes 1x4096 ...`` to some shapes.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time

import torch

from ._harness import graph_chain

HQ, HKV, D = 32, 8, 128
# (B, T) -> [((split, block_t, num_warps, num_stages) or None, switches)]; None = the shape's default
# (split_config); switches: a lowercase letter forces a launch switch on, its capital forces it off,
# an absent one keeps the module's default (q = Q_IN_LOOP, auto: on where a row has several splits;
# p = PDL, on). "" is the default launch. The B=1 "Q" rows are the tenth round's measured default
# splits and tiles before Q_IN_LOOP became automatic.
ATTN = {
    (1, 4096): [
        (None, ""),
        (None, "Q"),
        ((256, 64, 4, 4), ""),
        ((128, 64, 4, 3), ""),
        ((128, 32, 4, 4), ""),
        ((256, 32, 4, 4), ""),
        ((256, 64, 8, 3), ""),
        ((256, 64, 4, 2), ""),
        ((256, 128, 8, 2), ""),
        ((256, 128, 8, 3), ""),
    ],
    (1, 32768): [(None, ""), (None, "Q"), ((2048, 64, 4, 4), "")],
    (16, 4096): [(None, ""), (None, "P"), (None, "q")],
    (64, 2048): [(None, ""), (None, "P"), (None, "q")],
}
_SWITCHES = {
    "attn": {"q": "Q_IN_LOOP", "p": "PDL"},
    "gemv": {"p": "PDL", "f": "PREFETCH"},
    "gemm": {"p": "PDL"},
}
# A digit in a GEMV row's switches sets PREFETCH_STEPS (the steps a prefetching program asks L2 for).
_DEPTH = {"gemv": "PREFETCH_STEPS"}
# (K, N) -> [((block_r, block_n, num_warps, num_stages, split_rows) or None, switches)]; None =
# gemv_config's default; switches as for ATTN ("P": the GEMV's PDL forced off, "f"/"F" its L2 prefetch on /
# off -- by default on only where the grid has at most one program per SM; "" the defaults). num_stages is
# the K loop's software pipeline (cp.async into shared memory, stages - 1 steps ahead; 1 = none, the
# default; every pipelined row of the tenth round ran slower but at 1024×1024, see docs/benchmarks.md).
GEMV = {
    (4096, 11008): [(None, ""), (None, "f"), (None, "f1"), (None, "P")],
    (4096, 4096): [(None, ""), (None, "f"), (None, "f1"), (None, "P")],
    (11008, 4096): [(None, ""), (None, "f"), (None, "f1"), (None, "P")],
    (1024, 1024): [(None, ""), (None, "F"), (None, "1"), (None, "2"), (None, "P")],
}


GEMM_ROWS = 256
# (K, N) at GEMM_ROWS rows -> [((block_m, block_n, block_r, num_warps, num_stages, split_k) or None,
# switches)]; None = gemm_config's default; switches: "P" forces the GEMM's PDL off. Besides the default,
# the fastest of the twenty-third round's H100 sweep (12 configs a shape, docs/models.md): 16-row steps
# at K = 512, a K split in four at K = 1536.
GEMM = {
    (512, 3072): [(None, ""), ((64, 64, 16, 4, 3, 1), ""), ((64, 64, 8, 4, 3, 2), "")],
    (1536, 512): [
        (None, ""),
        ((64, 64, 8, 4, 3, 4), ""),
        ((32, 32, 16, 4, 3, 1), ""),
        ((32, 32, 8, 4, 3, 4), ""),
    ],
    (512, 768): [(None, ""), ((32, 32, 16, 4, 3, 1), ""), ((64, 64, 8, 4, 3, 2), "")],
    (512, 512): [
        (None, ""),
        ((32, 32, 16, 4, 3, 1), ""),
        ((32, 32, 8, 4, 3, 2), ""),
        ((32, 32, 16, 4, 3, 1), "P"),
    ],
}


def _split_config(b, t, v):
    from ..kernels import decode_attention as K

    if v is None:
        return None
    split, bt, warps, stages = v
    return K.SplitConfig(split, -(-t // split), bt, 16, D, D, num_warps=warps, num_stages=stages)


def _gemv_config(v):
    from ..kernels import int4_gemv as G

    if v is None:
        return None
    br, bn, warps, stages, split = v
    return G.GemvConfig(1, br, bn, num_warps=warps, num_stages=stages, split_rows=split)


def _gemm_config(v):
    from ..kernels import int4_gemm as M

    return None if v is None else M.GemmConfig(*v)


def _attn_operands(b, t, device):
    g = torch.Generator(device=device).manual_seed(b * t)  # on the device: B=64 T=2048 is 134M values
    q = torch.randn(b, HQ, D, generator=g, device=device, dtype=torch.float16)
    k = torch.randn(b, HKV, t, D, generator=g, device=device, dtype=torch.float16)
    v = torch.randn(b, HKV, t, D, generator=g, device=device, dtype=torch.float16)
    return q, k, v


def _gemv_operands(k, n, device):
    from ..quant import quantize_int4

    g = torch.Generator(device=device).manual_seed(k + n)
    qw = quantize_int4(torch.randn(n, k, generator=g, device=device), 128)
    x = torch.randn(1, k, generator=g, device=device, dtype=torch.bfloat16)
    return x, qw


def _gemm_operands(k, n, device):
    from ..quant import quantize_int4

    g = torch.Generator(device=device).manual_seed(k + n)
    qw = quantize_int4(torch.randn(n, k, generator=g, device=device), 128)
    x = torch.randn(GEMM_ROWS, k, generator=g, device=device, dtype=torch.float16)
    return x, qw


_OPERANDS = {"attn": _attn_operands, "gemv": _gemv_operands, "gemm": _gemm_operands}


def _picked(shape, shapes) -> bool:
    """Whether ``--shapes`` (``AxB`` names: ``1x4096`` for attention B=1 T=4096, ``4096x4096`` for a GEMV's
    K×N) keeps ``shape``; all are kept without it."""
    return not shapes or "x".join(map(str, shape)) in shapes


def _jobs(only=None, shapes=()):
    jobs = []
    if only in (None, "attn"):
        for (b, t), variants in ATTN.items():
            for v in variants if _picked((b, t), shapes) else ():
                jobs.append(("attn", (b, t), v))
    if only in (None, "gemv"):
        for (k, n), variants in GEMV.items():
            for v in variants if _picked((k, n), shapes) else ():
                jobs.append(("gemv", (k, n), v))
    if only in (None, "gemm"):
        for (k, n), variants in GEMM.items():
            for v in variants if _picked((k, n), shapes) else ():
                jobs.append(("gemm", (k, n), v))
    return jobs


def _module(kind):
    from ..kernels import decode_attention, int4_gemm, int4_gemv

    return {"attn": decode_attention, "gemv": int4_gemv, "gemm": int4_gemm}[kind]


def _set_switches(kind: str, letters: str) -> dict:
    """``kind``'s launch switches on where ``letters`` names them in lowercase, off where in
    capitals, else left at their defaults; returns the previous settings (for
    :func:`_restore_switches`)."""
    module = _module(kind)
    names = [*_SWITCHES[kind].values(), *([_DEPTH[kind]] if kind in _DEPTH else [])]
    before = {name: getattr(module, name) for name in names}
    for letter, name in _SWITCHES[kind].items():
        if letter in letters or letter.upper() in letters:
            setattr(module, name, letter in letters)
    for letter in letters:
        if letter.isdigit():
            setattr(module, _DEPTH[kind], int(letter))
    return before


def _restore_switches(kind: str, before: dict) -> None:
    module = _module(kind)
    for name, value in before.items():
        setattr(module, name, value)


def _call(kind, shape, v, ops):
    """``fn()`` for one job on operands ``ops``; ``v`` is ``(config, switches)``. The switches are
    set around every call, so they also hold while a graph captures it."""
    from ..kernels import decode_attention as K
    from ..kernels import int4_gemm as M
    from ..kernels import int4_gemv as G

    config, switches = v
    if kind == "attn":
        cfg = _split_config(*shape, config)

        def call(q, k, val):
            return K.decode_attention(q, k, val, scale=D**-0.5, config=cfg)
    elif kind == "gemm":
        cfg = _gemm_config(config)

        def call(x, w):
            return M.int4_gemm(x, w.packed, w.scales, w.mins, 128, config=cfg)
    else:
        cfg = _gemv_config(config)

        def call(x, w):
            return G.int4_gemv(x, w.packed, w.scales, w.mins, 128, config=cfg)

    def switched(*operands):
        before = _set_switches(kind, switches)
        try:
            return call(*operands)
        finally:
            _restore_switches(kind, before)

    return switched


def _compile(jobs) -> None:
    device = torch.device("cuda")
    for kind, shape, v in jobs:
        ops = _OPERANDS[kind](*shape, device)
        fn = _call(kind, shape, v, ops)
        try:
            fn(*ops)
            torch.cuda.synchronize()
        except Exception as exc:  # reported again, per row, by the timing pass
            print(f"compile failed: {kind} {shape} {v}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)


def main(argv: list[str] | None = None) -> None:
    import torch.nn.functional as F
    import triton.testing

    from ..kernels import _splitsum
    from ..kernels.int4_gemv import gemv_config
    from ..quant import Int4Weight, dequantize_int4
    from ..reference.attention import decode_attention as reference
    from ..reference.int4 import int4_gemv_blocked as gemv_oracle
    from .quant import _chain_copies, _tinygemm

    parser = argparse.ArgumentParser(prog="python -m nbxsig.bench.quant_sweep", description=__doc__)
    parser.add_argument("--jobs", type=int, default=12, help="parallel compile processes (0: none)")
    parser.add_argument("--compile-only", action="store_true", help="compile every variant, time nothing")
    parser.add_argument("--markdown", help="append the rows to this file")
    parser.add_argument("--only", choices=["attn", "gemv", "gemm"], help="sweep one kernel only")
    parser.add_argument("--shapes", nargs="+", default=(), help="only these shapes (1x4096: B=1 T=4096)")
    args = parser.parse_args(argv)
    jobs = _jobs(args.only, args.shapes)
    t0 = time.time()
    if args.jobs > 1:
        ctx = mp.get_context("spawn")
        with ctx.Pool(args.jobs) as pool:
            pool.map(_compile, [jobs[i :: args.jobs] for i in range(args.jobs)])
    print(f"compiled {len(jobs)} variants in {time.time() - t0:.0f} s", flush=True)
    if args.compile_only:
        return
    device = torch.device("cuda")

    def emit(text):
        print(text, flush=True)
        if args.markdown:
            with open(args.markdown, "a", encoding="utf-8") as f:
                f.write(text + "\n")

    def bench(fn, calls):
        return 1e3 * triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") / calls

    def rel(out, ref):
        return ((out.double() - ref.double()).norm() / ref.double().norm()).item()

    emit(f"GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}; triton {triton.__version__}")
    emit(
        "\n| case | variant | calls | µs/call | torch µs/call | rel. error | default's bits |"
        "\n|---|---|---:|---:|---:|---:|---|"
    )
    default_arena = _splitsum.CAPTURE_ARENA
    attn_passes = []
    if args.only in (None, "attn"):
        # Each shape's default again at the end of its rows: the drift within the process.
        attn_passes = [
            (shape, [(*v, default_arena) for v in variants] + [(*variants[0], default_arena)])
            for shape, variants in ATTN.items()
            if _picked(shape, args.shapes)
        ]
    for (b, t), rows in attn_passes:
        q, k, v = _attn_operands(b, t, device)
        nbytes = 2 * (k.numel() + v.numel() + 2 * q.numel())
        copies, calls = _chain_copies(nbytes, device)
        caches = [(k, v)] + [(k.clone(), v.clone()) for _ in range(copies - 1)]
        ref = reference(q.double(), k.double(), v.double(), scale=D**-0.5)
        q4 = q[:, :, None]
        sdpa = graph_chain(
            [
                lambda kv=caches[i % copies], q4=q4: torch.nn.functional.scaled_dot_product_attention(
                    q4, *kv, enable_gqa=True
                )
                for i in range(calls)
            ]
        )
        torch_us = bench(sdpa, calls)
        name = f"attn B={b} T={t}"
        default_out = None  # the default's output: the switches must not change a bit of it
        for cfg, switches, arena in rows:
            label = "default" if cfg is None else "split {} bt{} w{} s{}".format(*cfg)
            label += f" {switches or '-'}{' arena' if arena else ' memset'} counters"
            var = (cfg, switches)
            try:
                fn = _call("attn", (b, t), var, None)
                out = fn(q, k, v)
                err = rel(out, ref)
                if cfg is None and default_out is None:
                    default_out = out
                same = "—" if cfg is not None or default_out is None else str(torch.equal(out, default_out))
                _splitsum.CAPTURE_ARENA = arena
                replay = graph_chain(
                    [lambda kv=caches[i % copies], fn=fn, q=q: fn(q, *kv) for i in range(calls)]
                )
                _splitsum.CAPTURE_ARENA = default_arena
                us = bench(replay, calls)
                emit(f"| {name} | {label} | {calls} | {us:.2f} | {torch_us:.2f} | {err:.1e} | {same} |")
            except Exception as exc:  # one failing variant must not cost the others
                _splitsum.CAPTURE_ARENA = default_arena
                emit(f"| {name} | {label} | — | FAILED {type(exc).__name__}: {str(exc)[:100]} | | | |")
        del caches, sdpa
        torch.cuda.empty_cache()
    for (kk, n), variants in GEMV.items() if args.only in (None, "gemv") else ():
        if not _picked((kk, n), args.shapes):
            continue
        x, qw = _gemv_operands(kk, n, device)
        nbytes = qw.nbytes() + 2 * kk + 2 * n
        copies, calls = _chain_copies(nbytes, device)
        weights = [qw] + [
            Int4Weight(qw.packed.clone(), qw.scales.clone(), qw.mins.clone(), qw.group_size, qw.shape)
            for _ in range(copies - 1)
        ]
        ref = x.double() @ dequantize_int4(qw).double().t()
        tiny = [_tinygemm(kk, n, 128, device) for _ in range(copies)]
        torch_us = (
            bench(graph_chain([tiny[i % copies] for i in range(calls)]), calls) if tiny[0] else float("nan")
        )
        name = f"int4 GEMV 1×{kk} @ {kk}×{n}"
        rows = [(v_, default_arena) for v_ in variants]
        rows.insert(1, ((None, ""), not default_arena))
        for var, arena in rows:
            config, switches = var
            label = "default" if config is None else "R{} N{} w{} s{} split {}".format(*config)
            label += f" {switches or '-'}{' arena' if arena else ' memset'} counters"
            try:
                fn = _call("gemv", (kk, n), var, None)
                out = fn(x, qw)
                err = rel(out, ref)
                cfg = _gemv_config(config) or gemv_config(1, kk, n, 128)
                oracle = gemv_oracle(x, qw.packed, qw.scales, qw.mins, 128, block_rows=cfg.block_r,
                                     split_rows=cfg.split_rows)  # fmt: skip
                _splitsum.CAPTURE_ARENA = arena
                replay = graph_chain(
                    [lambda w=weights[i % copies], fn=fn, x=x: fn(x, w) for i in range(calls)]
                )
                _splitsum.CAPTURE_ARENA = default_arena
                us = bench(replay, calls)
                bits = f"oracle's: {torch.equal(out, oracle)}"
                emit(f"| {name} | {label} | {calls} | {us:.2f} | {torch_us:.2f} | {err:.1e} | {bits} |")
            except Exception as exc:
                _splitsum.CAPTURE_ARENA = default_arena
                emit(f"| {name} | {label} | — | FAILED {type(exc).__name__}: {str(exc)[:100]} | | | |")
        del weights, tiny
        torch.cuda.empty_cache()
    for (kk, n), variants in GEMM.items() if args.only in (None, "gemm") else ():
        if not _picked((kk, n), args.shapes):
            continue
        x, qw = _gemm_operands(kk, n, device)
        dense = dequantize_int4(qw, dtype=x.dtype).contiguous()
        ref = x.double() @ dense.double().t()
        calls = 16
        unfused = lambda x=x, qw=qw: F.linear(x, dequantize_int4(qw, dtype=x.dtype))  # noqa: E731
        unfused_us = bench(graph_chain([unfused] * calls), calls)
        dense_us = bench(graph_chain([lambda x=x, dense=dense: F.linear(x, dense)] * calls), calls)
        name = f"int4 GEMM {GEMM_ROWS}×{kk} @ {kk}×{n} fp16 (dense F.linear {dense_us:.2f} µs/call)"
        for var in variants:
            config, switches = var
            label = "default" if config is None else "M{} N{} R{} w{} s{} split {}".format(*config)
            label += f" {switches or '-'}"
            try:
                fn = _call("gemm", (kk, n), var, None)
                out = fn(x, qw)
                us = bench(graph_chain([lambda fn=fn, x=x, qw=qw: fn(x, qw)] * calls), calls)
                bits = f"repeat's: {torch.equal(fn(x, qw), out)}"
                err = rel(out, ref)
                emit(f"| {name} | {label} | {calls} | {us:.2f} | {unfused_us:.2f} | {err:.1e} | {bits} |")
            except Exception as exc:
                emit(f"| {name} | {label} | — | FAILED {type(exc).__name__}: {str(exc)[:100]} | | | |")
    print(f"sweep done in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
