"""Compile the int4 GEMV/GEMM, decode-attention, RMSNorm and rotary kernels for sm_90 without a GPU.

The interpreter accepts code the compiler refuses (``other=`` without ``mask=``, mixed layouts), so
the suite also compiles the real kernels ahead of time with Triton's bundled ptxas, in a child
process (this suite's ``TRITON_INTERPRET=1`` swaps Triton's JIT for the interpreter). The variants
are the ones the launchers pick for the benchmark shapes, plus the masked edge paths, and decode
attention with its launch switches (``Q_IN_LOOP``, ``PDL``) on.
"""

from __future__ import annotations

import pytest
from _sm90 import run_sm90_script

pytest.importorskip("triton")

SCRIPT = r"""
import dataclasses
from nbxsig.kernels import decode_attention as KA, int4_gemv as KG

def build(kernel, pointers, constexprs, attrs=None, **options):
    compiled = compile_sm90(kernel, pointers, constexprs, attrs=attrs, **options)  # from _sm90.PRELUDE
    # An H100/H200 block gets at most 227 KB of shared memory (checked only at launch otherwise).
    assert compiled.metadata.shared <= 227 * 1024, (kernel.__name__, constexprs, compiled.metadata.shared)
    return compiled

def pipelined(compiled):  # whether the loop's loads go through cp.async (Triton's software pipeline)
    return "async_copy_global_to_local" in compiled.asm["ttgir"]

gemv = {"x_ptr": "*bf16", "packed_ptr": "*i32", "scales_ptr": "*fp16", "mins_ptr": "*fp16",
        "bias_ptr": "*bf16", "out_ptr": "*bf16", "part_ptr": "*fp32", "count_ptr": "*i32"}
# (M, K, N, group, bias, N a multiple of the tile, K-loop pipeline stages: None = the default config,
#  the PDL switch)
for m, k, n, gs, bias, even_n, stages, pdl in [
        (1, 4096, 11008, 128, False, True, None, False), (1, 11008, 4096, 128, True, True, None, False),
        (3, 136, 41, 8, True, False, None, False), (8, 4096, 4096, 128, False, True, None, False),
        (1, 4096, 11008, 128, False, True, 3, True), (8, 4096, 4096, 128, False, True, 4, True)]:
    cfg = KG.gemv_config(m, k, n, gs)
    if stages is not None:  # the pipelined loop over 8-step splits (bench.quant_sweep's candidates)
        cfg = dataclasses.replace(cfg, num_stages=stages, split_rows=8 * cfg.block_r)
    splits = cfg.n_splits(k // 8)
    compiled = build(KG._int4_gemv_kernel, gemv,
          dict(N_ROWS=k // 8, GROUP_ROWS=gs // 8, SPLIT_ROWS=cfg.split_rows if splits > 1 else k // 8,
               N_SPLITS=splits, HAS_BIAS=bias, EVEN_N=even_n, BLOCK_M=cfg.block_m, BLOCK_R=cfg.block_r,
               BLOCK_N=cfg.block_n, STAGES=cfg.num_stages, PDL=pdl,
               PREFETCH_ROWS=KG._prefetch_rows(cfg.split_rows or k // 8, cfg.block_r) if pdl else 0),
          num_warps=cfg.num_warps, num_stages=cfg.num_stages, enable_fp_fusion=False)
    # num_stages reaches the K loop (its loads feed no dot: the launch option alone left it unpipelined).
    assert pipelined(compiled) == (cfg.num_stages > 1), (m, k, n, cfg)
    assert ("griddepcontrol" in compiled.asm["ptx"]) == pdl, (m, k, n, pdl)
    # With PDL the weights' first steps are asked of L2 before the wait (_launch.prefetch_l2).
    assert ("prefetch.global.L2" in compiled.asm["ptx"]) == pdl, (m, k, n, pdl)
# The one-row K loop as the JIT specializes the 4096×11008 launch (16-byte aligned pointers, unit strides
# constant, the row strides 16-divisible): the bit-exact contract's two FFMAs a weight (dequantize,
# accumulate) and nothing fused away, four 128-bit word loads a step, and the loop's length -- 635
# instructions for 128 weights a thread on Triton 3.6 (docs/models.md, "The issue-rate bound"); more than
# 5 a weight fails here before it costs time on the GPU.
import re
cfg = KG.gemv_config(1, 4096, 11008, 128)
names = KG._int4_gemv_kernel.arg_names
unit = dict(stride_xk=1, stride_pn=1, stride_sn=1, stride_on=1)
wide = ("stride_xm", "stride_pr", "stride_sg", "stride_om")  # 4096 / 11008: multiples of 16
attrs = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(names) if name in gemv or name in wide}
compiled = build(KG._int4_gemv_kernel, gemv,
      dict(**unit, N_ROWS=512, GROUP_ROWS=16, SPLIT_ROWS=cfg.split_rows, N_SPLITS=cfg.n_splits(512),
           HAS_BIAS=False, EVEN_N=True, BLOCK_M=1, BLOCK_R=cfg.block_r, BLOCK_N=cfg.block_n,
           STAGES=cfg.num_stages, PDL=True, PREFETCH_ROWS=0),
      attrs=attrs, num_warps=cfg.num_warps, num_stages=cfg.num_stages, enable_fp_fusion=False)
lines = [m.groups() for m in re.finditer(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", cuobjdump(compiled, "-sass"))]
jumps = [(int(at, 16), int(m.group(1), 16)) for at, op in lines if (m := re.search(r"BRA 0x([0-9a-f]+)", op))]
back = [(at, to) for at, to in jumps if to < at]
assert len(back) == 1, back  # one K loop (a backward branch)
end, start = back[0]
loop = [op for at, op in lines if start <= int(at, 16) <= end]
per_thread = cfg.block_r * cfg.block_n * 8 // (32 * cfg.num_warps)  # weights a thread takes per step
ffma = sum(1 for op in loop if re.match(r"(@!?P\w+\s+)?FFMA\b", op))
wide_loads = sum(1 for op in loop if re.match(r"(@!?P\w+\s+)?LDG\.E\.128\b", op))
assert ffma == 2 * per_thread, (ffma, per_thread)
assert wide_loads >= 4, wide_loads
assert len(loop) <= 5 * per_thread, (len(loop), per_thread)
# A narrow custom tile (the bit-exact tests' BLOCK_N 16) with PDL's L2 prefetch: fewer columns than one
# 128-byte line of words still prefetches one line (arange(0, BLOCK_N // 32) was empty: a compile error).
build(KG._int4_gemv_kernel, gemv,
      dict(N_ROWS=32, GROUP_ROWS=8, SPLIT_ROWS=8, N_SPLITS=4, HAS_BIAS=True, EVEN_N=False, BLOCK_M=2,
           BLOCK_R=4, BLOCK_N=16, STAGES=2, PDL=True, PREFETCH_ROWS=8),
      num_warps=4, num_stages=2, enable_fp_fusion=False)
deq = {"packed_ptr": "*i32", "scales_ptr": "*fp16", "mins_ptr": "*fp16", "out_ptr": "*bf16"}
build(KG._dequant_kernel, deq, dict(N_ROWS=512, GROUP_ROWS=16, BLOCK_R=16, BLOCK_N=128), num_warps=4)

attn = {n: "*fp16" for n in ("q_ptr", "k_ptr", "v_ptr", "bias_ptr", "out_ptr")}
attn.update(len_ptr="*i32", acc_ptr="*fp32", count_ptr="*i32", qk_scale="fp32")
# (B, T, D, lengths, bias, element size, decode attention's launch switches on)
shapes = [(1, 4096, 128, False, False, 2, False), (16, 4096, 128, True, True, 2, False),
          (1, 100, 129, True, False, 2, False), (3, 1000, 128, True, False, 4, False),
          (1, 24, 256, False, False, 4, False), (1, 4096, 128, False, False, 2, True),
          (1, 100, 129, True, True, 2, True)]
for b, t, d, has_len, has_bias, size, switches in shapes:
    cfg = KA.split_config(b, 8, 4, t, d, d)
    bs = triton.next_power_of_2(cfg.n_splits)
    fp32 = {n: "*fp32" for n in ("q_ptr", "k_ptr", "v_ptr", "bias_ptr", "out_ptr")}
    ptrs = attn if size == 2 else {**attn, **fp32}
    # Integer arguments as the launcher passes them for contiguous (B, 32, d) / (B, 8, t, d) tensors,
    # specialised as Triton's JIT does: 1 becomes a constexpr, multiples of 16 get the divisibility
    # attribute, pointers are 16-byte aligned. (Without them the kernel compiles unpipelined, with
    # 2-byte loads and a fraction of the real shared memory.)
    ints = dict(stride_qb=32 * d, stride_qh=d, stride_qd=1, stride_kb=8 * t * d, stride_kh=t * d,
                stride_kt=d, stride_kd=1, stride_vb=8 * t * d, stride_vh=t * d, stride_vt=d, stride_vd=1,
                stride_biasb=t if has_bias else 0, stride_biast=1 if has_bias else 0, stride_ob=32 * d,
                stride_oh=d, stride_od=1, T=t, D=d, DV=d, G=4, Hkv=8, q_step=0,
                ml_offset=b * 32 * cfg.n_splits * cfg.block_dv)
    names = KA._split_kernel.arg_names
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names)
             if n in ptrs and ptrs[n].startswith("*") or ints.get(n, 1) % 16 == 0}
    compiled = build(KA._split_kernel, ptrs,
          dict(**{n: 1 for n, v in ints.items() if v == 1},
               HAS_LEN=has_len, HAS_BIAS=has_bias, MASK_T=has_len or t % cfg.split != 0,
               EVEN_D=d == cfg.block_d, IEEE=size == 4, N_SPLITS=cfg.n_splits, SPLIT=cfg.split,
               BLOCK_T=cfg.block_t, BLOCK_G=cfg.block_g, BLOCK_D=cfg.block_d, BLOCK_DV=cfg.block_dv,
               MERGE_G=4, BLOCK_S=bs, CHUNK=min(bs, 16), Q_IN_LOOP=switches, PDL=switches),
          attrs, num_warps=cfg.num_warps, num_stages=cfg.num_stages if size == 2 else min(cfg.num_stages, 2))
    # K/V tiles stream through cp.async wherever a split has more than one tile and rows are 16-byte
    # multiples (D = 129 rows are not; one 24-key tile has nothing to overlap).
    assert pipelined(compiled) == (d % 8 == 0 and t > cfg.block_t), (b, t, d, cfg)
# The dequant-GEMM (M > 8 rows of 16-bit input): the streaming step's tiles (256 rows, N 512/1536) and a
# large-M tile, both input dtypes, one scale row a step (g128) and one a packed row (g32): the loop is
# software-pipelined (cp.async); and a K split in four (the partials' arrival path).
from nbxsig.kernels import int4_gemm as KM
for dt, (m, n), gs, pdl, split in [("fp16", (256, 512), 128, True, 1), ("bf16", (256, 1536), 128, True, 1),
                                   ("fp16", (4096, 4096), 32, False, 1), ("bf16", (256, 512), 128, True, 4)]:
    cfg = dataclasses.replace(KM.gemm_config(m, 512, n), split_k=split)
    steps = cfg.split_steps(64)
    compiled = build(KM._int4_gemm_kernel, {"x_ptr": f"*{dt}", "packed_ptr": "*i32", "scales_ptr": "*fp16",
                                            "mins_ptr": "*fp16", "bias_ptr": f"*{dt}", "out_ptr": f"*{dt}",
                                            "part_ptr": "*fp32", "count_ptr": "*i32"},
                     dict(stride_xk=1, stride_pn=1, stride_sn=1, stride_on=1, N_ROWS=64, GROUP_ROWS=gs // 8,
                          HAS_BIAS=True, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_R=cfg.block_r,
                          SPLIT_STEPS=steps, N_SPLITS=cfg.n_splits(64), PDL=pdl),
                     num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    bm = cfg.block_m
    assert pipelined(compiled), (dt, m, n, gs)
    # Hopper's wgmma where the tile has a warpgroup's 64 rows; mma.sync below that.
    assert ("wgmma.mma_async" in compiled.asm["ptx"]) == (bm >= 64), (dt, m, n, gs)
    assert ("griddepcontrol" in compiled.asm["ptx"]) == pdl, (dt, m, n, pdl)
# The sequence model's pointwise kernels: the streaming step's shapes (one and two passes; 8 query
# heads of 64, fp16 activations, int64 positions).
from nbxsig.kernels import rmsnorm as KN, rope as KR, swiglu as KS
norm_ptrs = {n: "*fp16" for n in ("x_ptr", "r_ptr", "s_ptr", "w_ptr", "y_ptr")}
for one_pass in (True, False):
    for residual in (False, True):
        build(KN._rms_norm_kernel, dict(norm_ptrs, eps="fp32"),
              dict(BLOCK_R=8, BLOCK_D=512, ONE_PASS=one_pass, HAS_RESIDUAL=residual), num_warps=4)
build(KS._silu_mul_kernel, {"gu_ptr": "*fp16", "y_ptr": "*fp16"}, dict(BLOCK_R=2, BLOCK_F=1024), num_warps=4)
build(KR._rope_kernel, {"x_ptr": "*fp16", "pos_ptr": "*i64", "freq_ptr": "*fp32", "y_ptr": "*fp16"},
      dict(BLOCK_R=8, BLOCK_H=8, BLOCK_D=32), num_warps=4)
rc = {n: "*fp16" for n in ("q_ptr", "k_ptr", "v_ptr", "qo_ptr", "kc_ptr", "vc_ptr")}
build(KR._rope_cache_kernel, dict(rc, pos_ptr="*i64", freq_ptr="*fp32"),
      dict(HQ=8, HKV=2, HALF=32, BLOCK_R=2, BLOCK_HQ=8, BLOCK_HKV=2, BLOCK_D=32), num_warps=4)
print("compiled")
"""


def test_kernels_compile_for_sm90():
    run_sm90_script(SCRIPT)
