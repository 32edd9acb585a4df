"""Compile the depthwise stencils for an H100/H200 (sm_90) without a GPU (see test_features_compile.py:
the interpreter accepts code the compiler refuses, so the real kernels are compiled ahead of time, in a
child process because this suite's ``TRITON_INTERPRET=1`` swaps Triton's JIT for the interpreter)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")

SCRIPT = r"""
import sys, time
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from nbxsig.kernels import depthwise as dk

def build(kernel, pointers, constexprs, **options):
    signature = {n: "constexpr" if n in constexprs else pointers.get(n, "i32") for n in kernel.arg_names}
    t = time.time()
    try:
        triton.compile(ASTSource(kernel, signature, constexprs=constexprs), target=GPUTarget("cuda", 90, 32),
                       options=options)
    except RuntimeError as err:
        if "ptxas" in str(err).lower():
            sys.exit(77)  # no ptxas here: nothing to check
        raise
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
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=900
    )
    if done.returncode == 77:
        pytest.skip("Triton's ptxas is unavailable on this machine")
    assert done.returncode == 0, done.stderr[-4000:]
    assert "compiled" in done.stdout
