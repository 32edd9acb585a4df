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
# The mel projection (the GPU's unfused path): its tile at each precision, Whisper's tail on one. The
# spectrogram tile streams through cp.async (its loads feed the dots); the frame-major buffer's unit
# bin stride is specialised as Triton's JIT does.
proj = {n: "*fp32" for n in ("p_ptr", "fb_ptr", "fb_lo_ptr", "out_ptr")}
proj["peak_ptr"] = "*i32"
config = dict(kmel.PROJECT_CONFIG)
meta = {k: config.pop(k) for k in ("num_warps", "num_stages")}
aligned = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(kmel._project_kernel.arg_names) if n in proj}
for precision, _, log, peak in variants:
    compiled = build(kmel._project_kernel, proj,
                     dict(stride_pf=1, stride_ot=1, HAS_FLOOR=log > 0, LOG=log, TRACK_PEAK=peak,
                          F_PAD=224, M_TOT=80, M1=64, M2=16, PRECISION=precision, **config),
                     floats=("floor",), attrs=aligned, **meta)
    assert "async_copy_global_to_local" in compiled.asm["ttgir"], precision
    assert compiled.metadata.shared <= 227 * 1024, (precision, compiled.metadata.shared)
print("compiled")
"""


def test_kernels_compile_for_sm90():
    run_sm90_script(SCRIPT)
