"""Compile the depthwise stencils for an H100/H200 (sm_90) without a GPU (see test_features_compile.py:
the interpreter accepts code the compiler refuses, so the real kernels are compiled ahead of time, in a
child process because this suite's ``TRITON_INTERPRET=1`` swaps Triton's JIT for the interpreter)."""

from __future__ import annotations

import pytest
from _sm90 import run_sm90_script

pytest.importorskip("triton")

SCRIPT = r"""
import time
from nbxsig.kernels import depthwise as dk

def build(kernel, pointers, constexprs, attrs=None, **options):
    t = time.time()
    compiled = compile_sm90(kernel, pointers, constexprs, attrs=attrs, **options)  # from _sm90.PRELUDE
    print(kernel.__name__, constexprs, f"{time.time() - t:.1f}s", flush=True)
    # TF32 wgmma pieces of N = 8 faulted on the H200 (tile (64, 128, 16, 8) of _sep_dot_kernel, the only
    # tile whose PTX had m64n8k8); _check_tf32_tile refuses such tiles, and no default may produce one.
    assert "m64n8k8" not in compiled.asm["ptx"], (kernel.__name__, constexprs, options)
    return compiled

def stack_bytes(compiled):  # bytes of local stack (spilled registers) ptxas gave it
    import re
    return int(re.search(r"STACK:(\d+)", cuobjdump(compiled, "-res-usage")).group(1))  # from _sm90.PRELUDE

for xt in ("*fp32", "*fp16"):
    ptr = {"x_ptr": xt, "w_ptr": "*fp32", "y_ptr": xt}
    # NCHW 3x3 and 7x7 (rows 4 and 8), channels_last 7x7 (64 channels x 8 columns), the 1-D looped form
    for kh, kw, bc, rows, bw, b in ((3, 3, 1, 4, 512, 0), (7, 7, 1, 8, 512, 1), (7, 7, 64, 4, 8, 0),
                                    (1, 33, 1, 1, 512, 2)):
        build(dk._dw_kernel, ptr, dict(KH=kh, KW=kw, J=1, STRIDE_H=1, BOUNDARY=b, UNROLL=kw <= dk._UNROLL_MAX,
                                       BLOCK_C=bc, ROWS=rows, BLOCK_W=bw), num_warps=4)
    sep = {"x_ptr": xt, "wy_ptr": "*fp32", "wx_ptr": "*fp32", "y_ptr": xt}
    for k, bc, rows, bw, static in ((5, 1, 4, 512, True), (5, 1, 4, 512, False), (7, 64, 4, 8, False)):
        build(dk._sep_kernel, sep, dict(KH=k, KW=k, STRIDE_H=1, BOUNDARY=1, UNROLL=True, BLOCK_C=bc,
                                        ROWS=rows, BLOCK_W=bw, STATIC=static), num_warps=4)
    # the fully unrolled 3x3 (NCHW and channels_last)
    for bc, rows, bw in ((1, 4, 512), (64, 4, 8)):
        build(dk._dw_static_kernel, ptr, dict(KH=3, KW=3, STRIDE_H=1, BOUNDARY=0, BLOCK_C=bc, ROWS=rows,
                                              BLOCK_W=bw), num_warps=4)
# the ring stencil (NCHW, stride 1) at its default tiles (_ring_config) for square images: 7x7 zero padding
# (512 wide: one tile per row, WHOLE_W), the separable 5x5 reflect, a float16 3x3 replicate and a float32 3x3
# zero padding (mapped edge columns)
RING = (("*fp16", 7, 7, False, 0, 512), ("*fp32", 5, 5, True, 1, 2048), ("*fp16", 3, 3, False, 2, 512),
        ("*fp32", 3, 3, False, 0, 512))
for xt, kh, kw, sep, b, size in RING:
    cycles, bw, warps = dk._ring_config(size, size, kh)
    build(dk._ring_kernel, {"x_ptr": xt, "w_ptr": "*fp32", "y_ptr": xt},
          dict(LEFT=kw // 2, KH=kh, KW=kw, SEPARABLE=sep, BOUNDARY=b, CYCLES=cycles, EVEN_W=True,
               WHOLE_W=size == bw, LONG_W=False, LONG_UNROLL=dk._LONG_UNROLL, BLOCK_W=bw),
          num_warps=warps)
# the 31x31 separable reflect blur (long row taps: the shift register) at 2048: strided rows on the ring,
# unit-stride rows on _long_rows_kernel at its two default tiles (taps as arguments, taps loaded), interior
# and edge tiles, each at its register cap with no spill
cycles, bw, warps = dk._ring_config(2048, 2048, 31, long_w=True)
build(dk._ring_kernel, {"x_ptr": "*fp32", "w_ptr": "*fp32", "y_ptr": "*fp32"},
      dict(LEFT=15, KH=31, KW=31, SEPARABLE=True, BOUNDARY=1, CYCLES=cycles, EVEN_W=True, WHOLE_W=False,
           LONG_W=True, LONG_UNROLL=dk._LONG_UNROLL, BLOCK_W=bw), num_warps=warps)
# (the interior launch of 16-byte aligned rows at its cap; unaligned rows at the edge tiles' cap)
aligned = ("x_ptr", "w_ptr", "y_ptr", "H", "W", "HO", "WO", "sxn", "sxc", "sxh", "syn", "syc", "syh")
for taps_args, (bw, warps, regs, edge_regs) in ((True, dk._LONG_ROWS_ARGS), (False, dk._LONG_ROWS_LOADED)):
    vec = bw // (32 * warps)
    off, nb = dk.long_window(15, 31, vec)
    arg_types = ("fp32",) * 31 if taps_args else ()
    for map_w, registers, divisible in ((False, regs, 1), (False, edge_regs, 0), (True, edge_regs, 1)):
        names = dk._long_rows_kernel.arg_names
        attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if divisible and n in aligned}
        compiled = build(dk._long_rows_kernel, {"x_ptr": "*fp32", "w_ptr": "*fp32", "y_ptr": "*fp32",
                                                "wy_args": arg_types, "wx_args": arg_types},
                         dict(LEFT=15, KH=31, KW=31, BOUNDARY=1, OFF=off, NB=nb, VEC=vec,
                              PREFETCH=dk._LONG_PREFETCH, TAPS_ARGS=taps_args, MAP_W=map_w, BLOCK_W=bw),
                         attrs=attrs, num_warps=warps, maxnreg=registers)
        if not map_w:  # the interior launch is the hot one: no spill (a local load per row)
            assert stack_bytes(compiled) == 0, (taps_args, registers, divisible)
# the tensor-core kernels at their default tiles (float32 input: tf32x3)
ptr = {"x_ptr": "*fp32", "w_ptr": "*fp32", "y_ptr": "*fp32"}
r, t, bu, warps = dk._TOEPLITZ_TILE
compiled = build(dk._fir_toeplitz_kernel, ptr, dict(K=129, BOUNDARY=0, R=r, T=t, BU=bu, PRECISION="tf32x3"),
                 num_warps=warps)
# Its non-finite recompute comes after the tile's store: no spill (a recompute of the whole tile spilled).
assert stack_bytes(compiled) == 0, stack_bytes(compiled)
bl, bk, warps = dk._BANK_TILE
build(dk._bank_kernel, ptr, dict(K=129, BOUNDARY=0, BL=bl, BF=64, BK=bk, PRECISION="tf32x3"), num_warps=warps)
sep = {"x_ptr": "*fp32", "wy_ptr": "*fp32", "wx_ptr": "*fp32", "y_ptr": "*fp32"}
for bh, bw, bu, bv, warps in (dk._SEP_DOT_TILE, (64, 32, 64, 32, 4), (128, 32, 64, 32, 8)):
    build(dk._sep_dot_kernel, sep, dict(KH=31, KW=31, BOUNDARY=1, BH=bh, BW=bw, BU=bu, BV=bv,
                                        PRECISION="tf32x3"), num_warps=warps)
res = {"x_ptr": "*fp32", "d_ptr": "*fp32", "start_ptr": "*i64", "rows_ptr": "*i32", "y_ptr": "*fp32"}
for bl, bn, bu, warps in ((64, 32, 32, 4), (64, 16, 16, 4), (128, 64, 32, 8)):  # bench variants
    build(dk._resample_dot_kernel, res, dict(KS=4, BL=bl, BN=bn, BU=bu, PRECISION="tf32x3"), num_warps=warps)
print("compiled")
"""


def test_depthwise_kernels_compile_for_sm90():
    run_sm90_script(SCRIPT, timeout=900)
