"""Compile the mel, four-step and streaming kernels for an H100/H200 (sm_90) without a GPU.

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
variants = [("tf32x3", 2, 0, False), ("tf32", 1, 4, True), ("ieee", 0, 2, False)]  # LOG 4: Whisper
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
proj.update(peak_ptr="*i32", band_ptr="*i32")
aligned = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(kmel._project_kernel.arg_names) if n in proj}
config = dict(kmel.PROJECT_CONFIG)
meta = {k: config.pop(k) for k in ("num_warps", "num_stages")}
m_tot = -(-80 // config["BLOCK_M"]) * config["BLOCK_M"]  # 80 mels in whole groups
for precision, _, log, peak in variants[:2]:  # the GPU's dot precisions; "ieee" is the interpreter's
    compiled = build(kmel._project_kernel, proj,
                     dict(stride_pf=1, stride_ot=1, HAS_FLOOR=log > 0, LOG=log, TRACK_PEAK=peak,
                          M_TOT=m_tot, PRECISION=precision, **config),
                     floats=("floor",), attrs=aligned, **meta)
    assert "async_copy_global_to_local" in compiled.asm["ttgir"], precision
    assert compiled.metadata.shared <= 227 * 1024, (precision, compiled.metadata.shared)
# The four-step kernel (the GPU's spectrogram, stft and mel paths): each default launch's config and
# mode within the H200's 227 KB of shared memory, and spilling no more than today. Four spill (Triton
# 3.6), each the fastest tile measured: n_fft 512 at "fp16" on 2 warps (power 24 bytes, complex 32; 4
# warps do not spill and ran 104.5 vs 95.4 µs), n_fft 2048's complex tile on 4 warps (312 bytes; 8
# warps ran 397.0 vs 320.2 µs) and the opt-in mel epilogue with Whisper's store (128 bytes; 120 before
# the store applied Whisper's (x + 4) / 4).
import re
from nbxsig.kernels import fourstep as fs

def stack_bytes(compiled):
    return int(re.search(r"STACK:(\d+)", cuobjdump(compiled, "-res-usage")).group(1))

fs_scalars = {"stride_xb", "stride_xl", "length", "stride_ob", "stride_of", "stride_ot", "n_frames", "hop",
              "pad", "scale", "power", "floor", "n_mels"}
launches = [  # (n_fft, stage precision, mode, stack bytes allowed): the auto paths' launches
    (400, "fp16", "power", 0), (400, "fp16x3", "power", 0), (512, "fp16", "power", 24),
    (400, "fp16", "power-f64-window", 0), (400, "fp16x3", "power-f64-window", 0),  # the mel path's
    (512, "fp16x3", "power", 0), (256, "fp16x3", "power", 0), (1000, "fp16", "power", 0),
    (400, "fp16x3", "complex", 0), (512, "fp16", "complex", 32), (2048, "fp16", "complex", 312),
    (400, "tf32", "mel", 128),
]
for n_fft, precision, mode, stack in launches:
    mel = mode == "mel"
    table = fs.STFT_CONFIGS if mode == "complex" else fs.SPEC_CONFIGS
    config = fs.MEL_CONFIG if mel else table.get((n_fft, precision), fs._default_config(n_fft))
    n1, n2 = fs.plan(n_fft, mel=mel)
    n1p, n2p, k2p = fs._pads(n1, n2, mel=mel)
    nyq = fs._split_nyquist(n2, mel=mel)
    # The stage bases are fp16 planes at the fp16 precisions.
    bases = ("b1_ptr", "b1_lo_ptr", "b2_ptr", "b2_lo_ptr")
    half = {n: "*fp16" for n in bases} if precision.startswith("fp16") else {}
    fs_pointers = {n: "*fp32" for n in fs._fourstep_kernel.arg_names if n.endswith("_ptr")}
    fs_pointers.update(peak_ptr="*i32", **half)
    if mode.endswith("f64-window"):  # the unfused mel path passes its padded float64 window
        fs_pointers["win_ptr"] = "*fp64"
    constexprs = dict(N_FFT=n_fft, N1=n1, N2=n2, N1P=n1p, N2P=n2p, K2P=k2p, MODE=1, HAS_WINDOW=True,
                      POWER_MODE=2, MEL=mel, HAS_FLOOR=mel, LOG=4 if mel else 0, TRACK_PEAK=mel, M_TOT=80,
                      M1=64, M2=16, BLOCK_T=config["BLOCK_T"], PRECISION=precision,
                      PERMUTE_STORE=fs.PERMUTE_STORE, COMPLEX=mode == "complex", NYQ=nyq,
                      K_END=n_fft // 2 + (0 if nyq else 1),
                      WINDOW_TABLE=n_fft in fs.WINDOW_TABLE_N.get(precision, ()))
    compiled = build(fs._fourstep_kernel, fs_pointers, constexprs, floats=("scale", "power", "floor"),
                     num_warps=config["num_warps"], num_stages=config["num_stages"])
    # Every other argument is a runtime scalar: a new constexpr missing here would compile as an i32.
    assert set(fs._fourstep_kernel.arg_names) - {*fs_pointers, *constexprs} == fs_scalars
    assert stack_bytes(compiled) <= stack, (n_fft, precision, mode, stack_bytes(compiled))
    assert compiled.metadata.shared <= 227 * 1024, (n_fft, precision, mode, compiled.metadata.shared)
print("compiled")
"""


def test_kernels_compile_for_sm90():
    run_sm90_script(SCRIPT)


GLUON_SCRIPT = r"""
import re
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource
from nbxsig.kernels import mel_sm90 as m

def descriptor(dtype, rows):
    element = gl.float16 if dtype == "fp16" else gl.float32
    layout = gl.NVMMASharedLayout.get_default_for([rows, m.BLOCK_F], element)
    return f"tensordesc<{dtype}[{rows}, {m.BLOCK_F}],{layout!r}>"

kernel = m._mel_sm90_kernel
names = list(kernel.arg_names)
# (n_fft, M1, M2, VEC, power mode, LOG, a normal floor, stack bytes allowed): tests/test_features_gpu.py's
# cases (K pieces 128+64+16, 128+16, 64+16, 32+16; one mel block or two; 16-byte loads or not), its logs
# with a normal and a subnormal floor, and Whisper's 80 and 128 mels (LOG 4), each within the H100/H200's
# 227 KB of shared memory and spilling no more than today: 128 mels' accumulators take 64 of the products'
# registers, and store offsets, the same for every tile, are hoisted out of the tile loop and reloaded from
# the stack once a tile (Whisper's 80 mels: 48 bytes, with its tile minimum and maximum); the loader's
# prefetch of its next tile costs 8 bytes where it spills (n_fft 414 unaligned, the natural log). The centre
# padding's four modes (constant, reflect, replicate, circular) take turns.
launches = [
    (400, 64, 16, True, 2, 0, False, 32), (400, 64, 16, True, 2, 4, True, 48),
    (400, 128, 0, True, 1, 0, False, 272), (400, 128, 0, True, 2, 4, True, 272),
    (256, 64, 0, True, 2, 0, False, 0), (414, 32, 16, False, 0, 0, False, 8),
    (128, 32, 0, True, 2, 0, False, 0), (64, 16, 0, True, 2, 0, False, 0),
    (400, 64, 16, True, 2, 1, True, 40), (400, 64, 16, True, 2, 2, False, 40),
]
for i, (n_fft, m1, m2, vec, power_mode, log, normal_floor, stack) in enumerate(launches):
    kp = -(-(n_fft // 2 + 1) // 16) * 16
    k0, k1, k2 = m.k_pieces(kp)
    constexprs = dict(POWER_MODE=power_mode, HAS_FLOOR=log > 0, NORMAL_FLOOR=normal_floor, LOG=log,
                      TRACK_PEAK=log == 4, PAD_MODE=i % 4, N_FFT=n_fft, KP=kp,
                      F_ALL=-(-kp // m.BLOCK_F) * m.BLOCK_F, K0W=k0, K1W=k1, K2W=k2, M1=m1, M2=m2,
                      BLOCK_T=m.BLOCK_T, BLOCK_F=m.BLOCK_F, ROWS=m.ROWS,
                      LOADER_WARPS=m.LOADER_WARPS, LOADER_REGS=m.LOADER_REGS, VEC=vec, num_warps=4)
    types = {n: "*fp32" for n in ("x_ptr", "wa_ptr", "wb_ptr", "out_ptr")}
    types.update(sync_ptr="*i32")
    types.update(stride_xb="i64", stride_ob="i64", stride_om="i64")
    types.update(power="fp32", floor="fp32")
    types.update(k0_desc=descriptor("fp16", k0), k1_desc=descriptor("fp16", k1 or 16),
                 k2_desc=descriptor("fp16", k2 or 16), f1_desc=descriptor("fp32", m1),
                 f2_desc=descriptor("fp32", m2 or 16))
    signature = {n: "constexpr" if n in constexprs else types.get(n, "i32") for n in names}
    # Every argument not named above is an i32 scalar: a new one must be added here deliberately.
    scalars = {"length", "n_frames", "t_a", "t_b", "hop", "pad", "n_mels", "n_tt", "n_tiles"}
    assert {n for n in names if signature[n] == "i32"} == scalars
    # The host passes 16-byte aligned pointers and strides (torch's allocations; descriptors need them).
    aligned = {(names.index(n),): [["tt.divisibility", 16]] for n in ("x_ptr", "wa_ptr", "wb_ptr", "out_ptr",
                                                                      "sync_ptr", "stride_xb",
                                                                      "stride_ob")}
    source = GluonASTSource(kernel, signature, constexprs=constexprs, attrs=aligned)
    try:
        compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                                  options=dict(num_warps=4, maxnreg=m._MAXNREG))
    except RuntimeError as err:
        if "ptxas" in str(err).lower():
            sys.exit(77)
        raise
    usage = cuobjdump(compiled, "-res-usage")
    assert int(re.search(r"STACK:(\d+)", usage).group(1)) <= stack, (n_fft, m1, m2, usage)
    assert compiled.metadata.shared <= 227 * 1024, (n_fft, m1, m2, compiled.metadata.shared)
    assert "warp_specialize" in compiled.asm["ttgir"]
print("compiled")
"""


def test_gluon_mel_kernel_compiles_for_sm90():
    run_sm90_script(GLUON_SCRIPT)
