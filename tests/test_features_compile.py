"""Compile the mel and streaming kernels for an H100/H200 (sm_90) without a GPU.

The interpreter (how the rest of the suite runs kernels) accepts code that the compiler refuses --
e.g. a variable whose shape changes inside an ``if`` block -- so CI also compiles the real kernels
ahead of time: AST → TTIR → TTGIR → LLVM IR → PTX → cubin, with Triton's bundled ptxas. It runs in
a child process because this suite's ``TRITON_INTERPRET=1`` swaps Triton's JIT for the interpreter.
"""

from __future__ import annotations

import pytest
from _sm90 import run_sm90_script

pytest.importorskip("triton")

SCRIPT = r"""
from nbxsig.kernels import mel as kmel, streaming as kstream

build = compile_sm90  # from _sm90.PRELUDE

build(kstream._istft_push_kernel,
      {n: "*fp32" for n in ("new_ptr", "hist_ptr", "hist_out_ptr", "bc_ptr", "bs_ptr", "w2_ptr", "out_ptr")},
      dict(H=3, R=4, F_PAD=16, H_PAD=4, BLOCK_S=256))
build(kmel._whisper_finish_kernel, {"out_ptr": "*fp32", "peak_ptr": "*i32"}, dict(BLOCK=1024))
names = "x wa wb cos cos_lo sin sin_lo fb fb_lo out".split()
pointers = {f"{n}_ptr": "*fp32" for n in names}
pointers["peak_ptr"] = "*i32"
variants = [("tf32x3", 2, 0, False), ("tf32", 1, 1, True), ("ieee", 0, 2, False)]
edge = {k: v for k, v in kmel._EDGE_CONFIG.items() if k.startswith("BLOCK")}
configs = [(c.kwargs, c.num_warps, c.num_stages, False) for c in kmel._CONFIGS]
configs.append((edge, kmel._EDGE_CONFIG["num_warps"], kmel._EDGE_CONFIG["num_stages"], True))
for i, (config, warps, stages, is_edge) in enumerate(configs):
    for precision, power_mode, log, peak in variants[: 3 if i == 0 else 2]:
        constexprs = dict(EDGE=is_edge, PAD_MODE=i % 4, POWER_MODE=power_mode, HAS_FLOOR=log > 0, LOG=log,
                          TRACK_PEAK=peak, K_HALF=201, F_PAD=208, M_TOT=80, M1=64, M2=16, PRECISION=precision,
                          **config)
        build(kmel._mel_kernel, pointers, constexprs, floats=("power", "floor"),
              num_warps=warps, num_stages=stages)
print("compiled")
"""


def test_kernels_compile_for_sm90():
    run_sm90_script(SCRIPT)
