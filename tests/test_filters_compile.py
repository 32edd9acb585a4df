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

def build(kernel, pointers, constexprs, **options):
    t = time.time()
    compile_sm90(kernel, pointers, constexprs, **options)  # from _sm90.PRELUDE
    print(kernel.__name__, constexprs, f"{time.time() - t:.1f}s", flush=True)

for xt in ("*fp32", "*fp16"):
    ptr = {"x_ptr": xt, "w_ptr": "*fp32", "y_ptr": xt}
    # NCHW 3x3 and 7x7 (rows 4 and 8), channels_last 7x7 (64 channels x 8 columns), the 1-D looped form
    for kh, kw, bc, rows, bw, b in ((3, 3, 1, 4, 512, 0), (7, 7, 1, 8, 512, 1), (7, 7, 64, 4, 8, 0),
                                    (1, 33, 1, 1, 512, 2)):
        build(dk._dw_kernel, ptr, dict(KH=kh, KW=kw, J=1, STRIDE_H=1, BOUNDARY=b, UNROLL=kw <= dk._UNROLL_MAX,
                                       BLOCK_C=bc, ROWS=rows, BLOCK_W=bw), num_warps=4)
    sep = {"x_ptr": xt, "wy_ptr": "*fp32", "wx_ptr": "*fp32", "y_ptr": xt}
    for k, bc, rows, bw in ((5, 1, 4, 512), (7, 64, 4, 8)):
        build(dk._sep_kernel, sep, dict(KH=k, KW=k, STRIDE_H=1, BOUNDARY=1, UNROLL=True, BLOCK_C=bc,
                                        ROWS=rows, BLOCK_W=bw), num_warps=4)
    # the fully unrolled 3x3 (NCHW and channels_last)
    for bc, rows, bw in ((1, 4, 512), (64, 4, 8)):
        build(dk._dw_static_kernel, ptr, dict(KH=3, KW=3, STRIDE_H=1, BOUNDARY=0, BLOCK_C=bc, ROWS=rows,
                                              BLOCK_W=bw), num_warps=4)
print("compiled")
"""


def test_depthwise_kernels_compile_for_sm90():
    run_sm90_script(SCRIPT, timeout=900)
