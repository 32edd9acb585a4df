"""Compile the unrolled STFT kernels for an H100/H200 (sm_90) without a GPU.

The interpreter (how the rest of the suite runs kernels) accepts code that the compiler refuses --
e.g. a starred tuple or a compile-time constant formed by in-kernel int arithmetic -- so CI also
compiles the unrolled kernels ahead of time (AST → TTIR → … → cubin with Triton's bundled ptxas) at
the iSTFTNet shape n_fft=20, hop=5, and checks that the paths the H200 measurements rely on survive:
the forward's 8-byte complex stores and the overlap-add's 8-byte (re, im) loads. It runs in a
child process because this suite's ``TRITON_INTERPRET=1`` swaps Triton's JIT for the interpreter.
"""

from __future__ import annotations

import pytest
from _sm90 import run_sm90_script

pytest.importorskip("triton")

SCRIPT = r"""
from nbxsig.kernels import stft as K

POINTERS = {name: "*fp32" for name in ("src_ptr", "win_ptr", "inv_ptr", "out_ptr")}

def build(kernel, constexprs, floats, **options):
    # Pointers arrive 16-byte aligned at a real launch (Triton specializes on it); say so here too.
    attrs = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(kernel.arg_names) if name in POINTERS}
    # compile_sm90 is from _sm90.PRELUDE
    return compile_sm90(kernel, POINTERS, constexprs, floats, attrs, **options).asm["ptx"]

fwd = dict(N=20, F=11, MODE=1, HAS_WINDOW=True, BLOCK_T=K.UNR_FWD_BLOCK, TILE_OUT=False, F_P2=1, LOG2_F=0)
floats, warps = ("scale", "power"), K.UNR_FWD_WARPS
ptx = build(K._stft_unrolled_kernel, dict(fwd, KIND=0, OUTPUT=0), floats, num_warps=warps)
assert "st.global.v2" in ptx, "complex output no longer stored as 8-byte pairs"
build(K._stft_unrolled_kernel, dict(fwd, KIND=1, MODE=4, OUTPUT=0), floats, num_warps=warps)
build(K._stft_unrolled_kernel, dict(fwd, KIND=0, OUTPUT=2), floats, num_warps=warps)
ola = dict(N=20, HOP=5, HAS_WINDOW=True, BLOCK_U=K.UNR_OLA_BLOCK)
ptx = build(K._ola_unrolled_kernel, dict(ola, F=11, KIND=1, DIVIDE=True, PAIRED=True, TILE_STORE=False,
            OUT_P2=8, LOG2_OUT=3, ROWS=1), ("scale",), num_warps=K.UNR_OLA_WARPS)
assert "ld.global.v2" in ptx, "spectrum no longer loaded as 8-byte (re, im) pairs"
build(K._ola_unrolled_kernel, dict(ola, F=20, KIND=0, DIVIDE=False, PAIRED=False, TILE_STORE=True,
      OUT_P2=16, LOG2_OUT=4, ROWS=2), ("scale",), num_warps=K.UNR_OLA_WARPS)
build(K._stft_unrolled_kernel, dict(fwd, KIND=1, MODE=4, OUTPUT=0, TILE_OUT=True, F_P2=16, LOG2_F=4), floats,
      num_warps=warps)
frames = dict(N=20, HOP=5, HAS_WINDOW=True, HOP_P2=8, LOG2_HOP=3, BLOCK_T=K.UNR_OLA_FRAMES_BLOCK)
warps = K.UNR_OLA_FRAMES_WARPS
ptx = build(K._ola_frames_kernel, dict(frames, F=11, KIND=1, DIVIDE=True, PAIRED=True), ("scale",),
            num_warps=warps)
assert "ld.global.v2" in ptx, "frame kernel: spectrum no longer loaded as 8-byte (re, im) pairs"
build(K._ola_frames_kernel, dict(frames, F=20, KIND=0, DIVIDE=False, PAIRED=False), ("scale",),
      num_warps=warps)
print("compiled")
"""


def test_unrolled_kernels_compile_for_sm90():
    run_sm90_script(SCRIPT)
