# ruff: noqa: E731  (benchmark cases are one-line closures)
"""int4 GEMV, decode attention and a streaming SeqModel step (``python -m nbxsig.bench quant``).

Baselines in the same process: torch's tinygemm int4 kernel (``aten._weight_int4pack_mm`` with
torch's own packing), bf16 ``F.linear`` on the dense weight, and ``F.scaled_dot_product_attention``
(``enable_gqa=True``) for decode attention.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from ._harness import Case, GraphReplay, graph_chain


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


def _chain_copies(nbytes: int, device: torch.device) -> tuple[int, int]:
    """``(copies, calls)`` for a back-to-back graph: enough distinct operand copies that they do not
    fit in L2 together (3× its size, up to 256 copies), so every call reads its operands from device
    memory as the layers of a decode step do, and at least 8 calls, so the graph's launch latency is
    amortised."""
    l2 = torch.cuda.get_device_properties(device).L2_cache_size
    # At most 256 calls in one graph. (The earlier cap of 64 answered an illegal memory access that
    # was the chains' operands being freed after capture; GraphReplay now holds them.)
    copies = max(1, min(256, -(-3 * l2 // nbytes)))
    return copies, max(8, copies)


def _linear_call(x: torch.Tensor, weight: torch.Tensor):
    return lambda: F.linear(x, weight)


def _sdpa_call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
    return lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)


def _tinygemm(k: int, n: int, group: int, device: torch.device):
    """A tinygemm call for an (N, K) int4 weight with random nibbles, or None where this torch lacks it."""
    try:
        q = torch.randint(0, 16, (n, k), dtype=torch.int32, device=device)
        q_uint8 = (q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8)
        packed = torch.ops.aten._convert_weight_to_int4pack(q_uint8, 8)
        sz = torch.rand(k // group, n, 2, dtype=torch.bfloat16, device=device)
        x = torch.randn(1, k, dtype=torch.bfloat16, device=device)
        fn = lambda: torch.ops.aten._weight_int4pack_mm(x, packed, group, sz)
        fn()
        return fn
    except (RuntimeError, AttributeError, TypeError) as exc:  # kernel missing on this build/arch
        print(f"tinygemm baseline unavailable: {exc}")
        return None


def _gemv_cases(quick: bool, device: torch.device) -> list[Case]:
    from ..kernels import int4_gemv as K
    from ..quant import Int4Weight, dequantize_int4, int4_linear, quantize_int4

    shapes = [
        (4096, 11008, "≤ 8 µs"),
        (4096, 4096, "≤ 6 µs"),
        (11008, 4096, "≤ 8 µs"),
        (1024, 1024, "≤ bf16"),
    ]
    if quick:
        shapes = shapes[:1]
    out = []
    for k, n, target in shapes:
        g = torch.Generator(device="cpu").manual_seed(k + n)
        w = torch.randn(n, k, generator=g).to(device)
        qw = quantize_int4(w, 128)
        x = torch.randn(1, k, generator=g).to(device, torch.bfloat16)
        dense = dequantize_int4(qw, dtype=torch.bfloat16).contiguous()  # a plain (N, K) bf16 weight
        nbytes = qw.nbytes() + 2 * k + 2 * n
        run = lambda x=x, qw=qw: int4_linear(x, qw, backend="triton")
        check = lambda x=x, qw=qw: _rel(
            int4_linear(x, qw, backend="triton"), x.double() @ dequantize_int4(qw).double().t()
        )
        name = f"int4 GEMV 1×{k} @ {k}×{n} g128 bf16"
        tiny = _tinygemm(k, n, 128, device)
        if tiny is not None:
            out.append(Case(f"{name} vs tinygemm", run, tiny, nbytes, target, check))
        bf16 = lambda x=x, dense=dense: F.linear(x, dense)
        out.append(Case(f"{name} vs bf16 F.linear", run, bf16, nbytes, target, check))
        if not quick:
            # The 1024×1024 row's target is bf16's time, so its graph rows compare with bf16.
            use_tiny = tiny is not None and target != "≤ bf16"
            base = tiny if use_tiny else bf16
            label = "tinygemm" if use_tiny else "bf16 F.linear"
            out.append(
                Case(
                    f"{name} vs {label}, both CUDA-graph replays",
                    GraphReplay(run),
                    GraphReplay(base),
                    nbytes,
                    target,
                )
            )
            copies, calls = _chain_copies(nbytes, device)
            weights = [qw] + [
                Int4Weight(qw.packed.clone(), qw.scales.clone(), qw.mins.clone(), qw.group_size, qw.shape)
                for _ in range(copies - 1)
            ]
            ours = graph_chain(
                [lambda x=x, w=weights[i % copies]: int4_linear(x, w, backend="triton") for i in range(calls)]
            )
            bases = [base] + [
                _tinygemm(k, n, 128, device) if use_tiny else _linear_call(x, dense.clone())
                for _ in range(copies - 1)
            ]
            theirs = graph_chain([bases[i % copies] for i in range(calls)])
            out.append(
                Case(
                    f"{name} vs {label}, {calls} calls back to back in one CUDA graph over {copies} weight "
                    "copies (per call)",
                    ours,
                    theirs,
                    nbytes,
                    target,
                    calls=calls,
                )
            )
        if not quick and (k, n) == (4096, 11008):
            # Tile/split variants as graph replays, for the record (the default: gemv_config(1, k, n, 128));
            # unpipelined like the default, as in every earlier table (pipelined ones: bench.quant_sweep).
            rows = k // 8
            for br, bn, warps, split in [
                (16, 128, 4, 64),
                (8, 256, 4, 64),
                (16, 256, 8, 128),
                (16, 128, 4, 128),
            ]:
                cfg = K.GemvConfig(1, br, bn, num_warps=warps, num_stages=1, split_rows=split)
                fn = lambda x=x, qw=qw, cfg=cfg: K.int4_gemv(
                    x, qw.packed, qw.scales, qw.mins, 128, config=cfg
                )
                label = f"R{br} N{bn} w{warps} {cfg.n_splits(rows)} splits"
                out.append(
                    Case(f"{name} tile {label}, graph", GraphReplay(fn), None, nbytes, "", notes="variant")
                )
    # M > 8 rows: the dequantize + matmul path (int4_linear's default) against bf16 F.linear, and the
    # fused dequant-GEMM (quant.FUSED_GEMM, off by default until measured) against that path at a
    # 64-row layer and the streaming SeqModel's 256-row linears.
    from ..kernels.int4_gemm import int4_gemm

    for m, k, n in [(64, 4096, 4096)] + ([] if quick else [(256, 512, 1536), (256, 1536, 512)]):
        qw = quantize_int4(torch.randn(n, k, device=device), 128)
        x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
        dense = dequantize_int4(qw, dtype=torch.bfloat16).contiguous()  # a plain (N, K) bf16 weight
        nbytes = qw.nbytes() + 2 * m * (k + n)
        unfused = lambda x=x, qw=qw: F.linear(x, dequantize_int4(qw, dtype=x.dtype, backend="triton"))
        fused = lambda x=x, qw=qw: int4_gemm(x, qw.packed, qw.scales, qw.mins, qw.group_size)
        check = lambda fused=fused, x=x, qw=qw: _rel(fused(), x.double() @ dequantize_int4(qw).double().t())
        name = f"int4 linear {m}×{k} @ {k}×{n} bf16"
        if (m, k, n) == (64, 4096, 4096):
            out.append(
                Case(
                    f"{name} (dequant + matmul) vs bf16 F.linear",
                    lambda x=x, qw=qw: int4_linear(x, qw, backend="triton"),
                    lambda x=x, dense=dense: F.linear(x, dense),
                    nbytes,
                    "report",
                )
            )
        calls = 16
        out.append(
            Case(
                f"{name} fused dequant-GEMM vs dequant + matmul, {calls} calls back to back in one CUDA "
                "graph (per call)",
                graph_chain([fused] * calls),
                graph_chain([unfused] * calls),
                nbytes,
                "report",
                check,
                calls=calls,
            )
        )
    return out


def _attention_cases(quick: bool, device: torch.device) -> list[Case]:
    from ..attention import decode_attention
    from ..reference.attention import decode_attention as reference

    rows = [(1, 4096, "≤ 9 µs"), (16, 4096, "≤ 72 µs"), (64, 2048, "≤ 130 µs"), (1, 32768, "≤ 40 µs")]
    if quick:
        rows = rows[:1]
    hq, hkv, d = 32, 8, 128
    out = []
    for b, t, target in rows:
        g = torch.Generator(device="cpu").manual_seed(b * t)
        q = torch.randn(b, hq, d, generator=g).to(device, torch.float16)
        k = torch.randn(b, hkv, t, d, generator=g).to(device, torch.float16)
        v = torch.randn(b, hkv, t, d, generator=g).to(device, torch.float16)
        q4 = q[:, :, None]
        run = lambda q=q, k=k, v=v: decode_attention(q, k, v, backend="triton")
        sdpa = lambda q4=q4, k=k, v=v: F.scaled_dot_product_attention(q4, k, v, enable_gqa=True)
        check = lambda q=q, k=k, v=v, run=run: _rel(
            run(), reference(q.float(), k.float(), v.float(), scale=d**-0.5)
        )
        nbytes = 2 * (k.numel() + v.numel() + 2 * q.numel())
        name = f"decode attention fp16 Hq=32 Hkv=8 D=128 B={b} T={t}"
        out.append(Case(f"{name} vs SDPA", run, sdpa, nbytes, target, check))
        if not quick:
            out.append(
                Case(
                    f"{name} vs SDPA, both CUDA-graph replays",
                    GraphReplay(run),
                    GraphReplay(sdpa),
                    nbytes,
                    target,
                )
            )
            copies, calls = _chain_copies(nbytes, device)
            caches = [(k, v)] + [(k.clone(), v.clone()) for _ in range(copies - 1)]
            ours = graph_chain(
                [
                    lambda q=q, kv=caches[i % copies]: decode_attention(q, *kv, backend="triton")
                    for i in range(calls)
                ]
            )
            theirs = graph_chain([_sdpa_call(q4, *caches[i % copies]) for i in range(calls)])
            out.append(
                Case(
                    f"{name} vs SDPA, {calls} calls back to back in one CUDA graph over {copies} KV copies "
                    "(per call)",
                    ours,
                    theirs,
                    nbytes,
                    target,
                    calls=calls,
                )
            )
    return out


def _model_cases(quick: bool, device: torch.device) -> list[Case]:
    from ..models import SeqConfig, SeqModel

    cfg = SeqConfig(
        d_in=128, d_model=512, n_layers=8, n_heads=8, n_kv_heads=2, d_ff=1536, d_out=128, window=256
    )
    streams = 64 if quick else 256
    torch.manual_seed(0)
    dense = SeqModel(cfg).to(device, torch.float16).eval()
    model = copy.deepcopy(dense).quantize(group_size=128)
    # Baseline: the same model with fp16 weights, also graph-captured. Both models stay referenced by
    # the closures below, so the memory their graphs read stays alive.
    fused = copy.deepcopy(model)
    dense_step = dense.capture_step(streams)
    int4_step = model.capture_step(streams)
    # The int4 step with its 256-row linears through the fused dequant-GEMM: the switch is read while
    # the step is captured, so this graph keeps it.
    from .. import quant

    before, quant.FUSED_GEMM = quant.FUSED_GEMM, True
    try:
        fused_step = fused.capture_step(streams)
    finally:
        quant.FUSED_GEMM = before
    x = torch.randn(streams, cfg.d_in, device=device, dtype=torch.float16)
    weights = sum(p.numel() * p.element_size() for p in model.buffers()) + sum(
        p.numel() * p.element_size() for p in model.parameters()
    )
    kv = 2 * cfg.n_layers * streams * cfg.n_kv_heads * cfg.window * cfg.head_dim * 2
    return [
        Case(
            f"SeqModel step d512 L8 int4 {streams} streams W256 graph vs fp16 weights graph",
            lambda: int4_step(x),
            lambda: dense_step(x),
            weights + kv,
            "report µs/step, streams·steps/s",
        ),
        Case(
            f"SeqModel step d512 L8 int4 {streams} streams W256 graph, fused dequant-GEMM vs "
            "dequant + matmul",
            lambda: fused_step(x),
            lambda: int4_step(x),
            weights + kv,
            "report",
        ),
    ]


def cases(*, quick: bool = False) -> list[Case]:
    device = torch.device("cuda")
    return [*_gemv_cases(quick, device), *_attention_cases(quick, device), *_model_cases(quick, device)]
