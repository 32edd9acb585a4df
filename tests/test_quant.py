"""int4 format, quantization error, the fused GEMV vs its oracles, modules and files."""

from __future__ import annotations

import contextlib
import dataclasses
import os

import pytest
import torch
from _marks import BF16_DOT_XFAIL
from torch import nn

import nbxsig.quant as Q
from nbxsig.errors import ParameterTypeError, ParameterValueError
from nbxsig.kernels import int4_gemv as K
from nbxsig.kernels._launch import pdl_supported
from nbxsig.reference import int4 as R
from nbxsig.testing import assert_close, random_tensor


def test_nibble_layout_on_hand_built_values():
    # Column 0 holds k = 0..15 with q = k; column 1 holds 15 - k. Word r, nibble i is element k = 8r + i.
    q = torch.stack([torch.arange(16), 15 - torch.arange(16)], dim=1).to(torch.uint8)
    packed = Q.pack_int4(q)
    assert packed.shape == (2, 2) and packed.dtype == torch.int32
    expected_word0 = sum(i << (4 * i) for i in range(8))  # 0x76543210
    assert packed[0, 0].item() == expected_word0 == 0x76543210
    # 0xFEDCBA98 does not fit int32: it is stored as its two's-complement value.
    assert packed[1, 0].item() == 0xFEDCBA98 - (1 << 32)
    assert packed[0, 1].item() == 0x89ABCDEF - (1 << 32)
    assert torch.equal(Q.unpack_int4(packed), q)


@pytest.mark.parametrize("shape", [(8, 1), (64, 33), (256, 7)], ids=lambda s: f"K{s[0]}-N{s[1]}")
def test_pack_unpack_round_trip(shape, generator):
    q = torch.randint(0, 16, shape, generator=generator, dtype=torch.int64).to(torch.uint8)
    assert torch.equal(Q.unpack_int4(Q.pack_int4(q)), q)


@pytest.mark.parametrize("group_size", [32, 128])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_quantization_error_within_half_a_step(group_size, dtype, generator):
    n, k = 37, 256
    w = (3.0 * random_tensor((n, k), generator=generator)).to(dtype)
    qw = Q.quantize_int4(w, group_size)
    assert qw.packed.shape == (k // 8, n) and qw.scales.shape == (k // group_size, n)
    assert qw.scales.dtype == qw.mins.dtype == torch.float16
    err = (Q.dequantize_int4(qw).double() - w.double()).abs()
    step = qw.scales.double().repeat_interleave(group_size, dim=0).t()  # (N, K)
    # scale/2 plus float32 rounding of q·scale + min (|w| < 8 here).
    assert bool((err <= step / 2 + 1e-6).all()), f"max excess {(err - step / 2).max().item():.3e}"
    assert qw.nbytes() * 8 / (n * k) == pytest.approx(4 + 32 / group_size)


def test_quantize_a_weight_that_requires_grad(generator, recwarn):
    # A model's parameter, quantized directly: read as data, with no warning from torch and no graph.
    w = random_tensor((8, 64), generator=generator).requires_grad_()
    qw = Q.quantize_int4(w, 32)
    assert not (qw.scales.requires_grad or qw.mins.requires_grad)
    assert torch.equal(Q.dequantize_int4(qw), Q.dequantize_int4(Q.quantize_int4(w.detach(), 32)))
    assert [str(record.message) for record in recwarn] == []


def test_constant_group_is_exact():
    w = torch.full((4, 64), 0.375)
    assert torch.equal(Q.dequantize_int4(Q.quantize_int4(w, 32)), w)


M_VALUES = [1, 3, 8, 64]


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("m", M_VALUES, ids=lambda m: f"M{m}")
def test_int4_linear_matches_linear_on_dequantized_weight(m, backend, generator, device):
    n, k, gs = 67, 256, 64  # odd N
    qw = Q.quantize_int4(random_tensor((n, k), generator=generator), gs).to(device)
    x = random_tensor((m, k), generator=generator, device=device)
    bias = random_tensor((n,), generator=generator, device=device)
    out = Q.int4_linear(x, qw, bias, backend=backend)
    ref = torch.nn.functional.linear(
        x.cpu().double(), Q.dequantize_int4(qw).cpu().double(), bias.cpu().double()
    )
    assert out.shape == (m, n) and out.dtype == torch.float32
    assert_close(out, ref, dtype="float32", rel_error=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_int4_linear_half_inputs(dtype, generator, device):
    n, k = 45, 128
    qw = Q.quantize_int4(random_tensor((n, k), generator=generator), 32).to(device)
    x = random_tensor((2, k), generator=generator, dtype=dtype, device=device)
    out = Q.int4_linear(x, qw, backend="triton")
    ref = x.cpu().double() @ Q.dequantize_int4(qw).cpu().double().t()
    assert out.dtype == dtype
    assert_close(out, ref, dtype=dtype)


@pytest.mark.parametrize(
    "dtype", [torch.float16, pytest.param(torch.bfloat16, marks=BF16_DOT_XFAIL)], ids=str
)
@pytest.mark.parametrize(
    "m,n,k,gs,case",
    [(9, 67, 256, 64, ""), (70, 40, 136, 8, "bias"), (33, 130, 512, 128, "strided")],
    ids=["M9-g64", "M70-g8-partial-step-bias", "M33-g128-strided-x"],
)
def test_fused_gemm_matches_float64_on_dequantized_weight(
    m, n, k, gs, case, dtype, generator, device, monkeypatch
):
    # M > 8 rows of 16-bit input take the dequant-GEMM kernel; the weight it forms is exactly
    # dequantize_int4(w, dtype) (K 136 = 17 packed rows: a partial 8-row step, groups of 8 -- a scale
    # row per packed row; g64/g128: one scale row a step).
    monkeypatch.setattr(Q, "FUSED_GEMM", True)
    assert Q.gemv_path(m, dtype) == "fused_gemm"
    qw = Q.quantize_int4(random_tensor((n, k), generator=generator), gs).to(device)
    x = random_tensor((m, 2 * k if case == "strided" else k), generator=generator, dtype=dtype, device=device)
    if case == "strided":
        x = x[:, ::2]  # K stride 2
    bias = random_tensor((n,), generator=generator, dtype=dtype, device=device) if case == "bias" else None
    out = Q.int4_linear(x, qw, bias, backend="triton")
    w = Q.dequantize_int4(qw.to("cpu"), dtype=dtype).double()
    ref = torch.nn.functional.linear(x.cpu().double(), w, None if bias is None else bias.cpu().double())
    assert out.shape == (m, n) and out.dtype == dtype
    assert_close(out, ref, dtype=dtype)
    assert torch.equal(Q.int4_linear(x, qw, bias, backend="triton"), out)  # deterministic


@pytest.mark.parametrize("split_k", [2, 3, 16], ids=lambda s: f"split{s}")
def test_fused_gemm_split_over_k_matches_float64(split_k, generator, device):
    # K 520 = 65 packed rows = 9 steps of 8 (the last partial): 2 splits of 5 + 4 steps, 3 of 3 + 3 + 3,
    # and 16 asked for, 9 made (one step each). The partials are added in split order by the last
    # program to arrive, so repeated calls agree bit for bit (the GPU test also reuses the counters).
    from nbxsig.kernels import int4_gemm as KM

    m, n, k = 37, 70, 520
    qw = Q.quantize_int4(random_tensor((n, k), generator=generator), 8).to(device)
    x = random_tensor((m, k), generator=generator, dtype=torch.float16, device=device)
    bias = random_tensor((n,), generator=generator, dtype=torch.float16, device=device)
    cfg = dataclasses.replace(KM.gemm_config(m, k, n), split_k=split_k)
    out = KM.int4_gemm(x, qw.packed, qw.scales, qw.mins, 8, bias, config=cfg)
    w = Q.dequantize_int4(qw.to("cpu"), dtype=torch.float16).double()
    ref = torch.nn.functional.linear(x.cpu().double(), w, bias.cpu().double())
    assert_close(out, ref, dtype=torch.float16)
    assert torch.equal(KM.int4_gemm(x, qw.packed, qw.scales, qw.mins, 8, bias, config=cfg), out)
    one = KM.int4_gemm(x, qw.packed, qw.scales, qw.mins, 8, bias)
    assert_close(out, one, dtype=torch.float16)  # the same sum in another order


def test_quant_sweep_gemm_rows_run_their_configs(generator, device):
    # Every GEMM row of the tuning sweep (bench.quant_sweep.GEMM) is a launch int4_gemm takes, switches
    # included, and gives the dequantized weight's product (small operands here; the sweep's own are
    # 256 rows).
    from nbxsig.bench import quant_sweep as S

    qw = Q.quantize_int4(random_tensor((40, 256), generator=generator), 128).to(device)
    x = random_tensor((20, 256), generator=generator, dtype=torch.float16, device=device)
    ref = x.cpu().double() @ Q.dequantize_int4(qw.to("cpu"), dtype=torch.float16).double().t()
    for shape, variants in S.GEMM.items():
        for v in variants:
            assert_close(S._call("gemm", shape, v, None)(x, qw), ref, dtype=torch.float16, msg=str(v))


def test_gemm_config_splits_k_into_whole_steps():
    from nbxsig.kernels.int4_gemm import GemmConfig

    assert GemmConfig(16, 32, split_k=1).split_steps(65) == 9  # 65 packed rows: 9 steps of 8, one split
    assert GemmConfig(16, 32, split_k=2).split_steps(65) == 5  # 5 + 4
    assert GemmConfig(16, 32, split_k=16).split_steps(65) == 1  # no more splits than steps
    assert GemmConfig(16, 32, block_r=16, split_k=4).split_steps(192) == 3  # 12 steps of 16 rows
    assert [GemmConfig(16, 32, split_k=k).n_splits(65) for k in (1, 2, 3, 16)] == [1, 2, 3, 9]


@pytest.mark.parametrize("m,fused_gemm", [(3, False), (12, True)], ids=["gemv", "gemm"])
def test_fused_paths_take_a_strided_bias(m, fused_gemm, generator, device, monkeypatch):
    # The kernels read the bias as a dense row: a strided view is made contiguous first.
    monkeypatch.setattr(Q, "FUSED_GEMM", fused_gemm)
    qw = Q.quantize_int4(random_tensor((24, 64), generator=generator), 32).to(device)
    x = random_tensor((m, 64), generator=generator, dtype=torch.float16, device=device)
    bias = random_tensor((48,), generator=generator, dtype=torch.float16, device=device)[::2]
    out = Q.int4_linear(x, qw, bias, backend="triton")
    ref = x.cpu().double() @ Q.dequantize_int4(qw.to("cpu")).double().t() + bias.cpu().double()
    assert_close(out, ref, dtype=torch.float16)


def test_gemm_tiles_fill_the_gpu_then_stop_shrinking():
    from nbxsig.kernels.int4_gemm import gemm_tiles

    assert gemm_tiles(4096, 4096) == (64, 64)  # 4096 programs: the full tile
    assert gemm_tiles(256, 1536) == (32, 64)  # 192 programs
    assert gemm_tiles(256, 512) == (32, 32)  # 128 programs
    assert gemm_tiles(9, 40) == (16, 32)  # the smallest tile, whatever the grid


@pytest.mark.parametrize(
    "m,fused_gemm", [(3, False), (20, True), (20, False)], ids=["gemv", "gemm", "unfused"]
)
def test_every_path_differentiates_like_linear_on_the_dequantized_weight(
    m, fused_gemm, generator, device, monkeypatch
):
    # The fused GEMV (M ≤ 8) and GEMM (M > 8) have no autograd of their own: int4_linear wraps them so
    # x and bias get F.linear's gradients on the dequantized weight, as the unfused path does.
    monkeypatch.setattr(Q, "FUSED_GEMM", fused_gemm)
    n, k = 40, 128
    qw = Q.quantize_int4(random_tensor((n, k), generator=generator), 32).to(device)
    x = random_tensor((m, k), generator=generator, dtype=torch.float16, device=device).requires_grad_()
    bias = random_tensor((n,), generator=generator, dtype=torch.float16, device=device).requires_grad_()
    grad = random_tensor((m, n), generator=generator, dtype=torch.float16, device=device)
    Q.int4_linear(x, qw, bias, backend="triton").backward(grad)
    w = Q.dequantize_int4(qw.to("cpu")).double()
    assert_close(x.grad, grad.cpu().double() @ w, dtype=torch.float16)
    assert_close(bias.grad, grad.cpu().double().sum(0), dtype=torch.float16)


def test_fma_float32_rounds_once(generator):
    """The oracle's float32 FMA is correctly rounded: against exact rational arithmetic on random
    operands, and on hand-built sums that land exactly halfway between two float32 values after the
    float64 rounding (where rounding float64 to float32 goes the wrong way)."""
    from fractions import Fraction

    import numpy as np

    def exact(a, b, c):  # the float32 nearest a·b + c, ties to even
        v = Fraction(a) * Fraction(b) + Fraction(c)
        r = np.float32(float(v))
        near = [np.nextafter(r, np.float32(-np.inf)), r, np.nextafter(r, np.float32(np.inf))]
        return min(near, key=lambda t: (abs(Fraction(float(t)) - v), int(np.float32(t).view(np.uint32)) & 1))

    a, b, c = (torch.randn(3000, generator=generator) for _ in range(3))
    fused = R.fma_float32(a, b, c)
    assert all(
        np.float32(f) == exact(x, y, z)
        for f, x, y, z in zip(fused.tolist(), a.tolist(), b.tolist(), c.tolist(), strict=True)
    )
    # 1 + 2^-23 + 2^-24 - 2^-70 is just below the midpoint of 1 + 2^-23 and 1 + 2^-22: float64 rounds it onto
    # the midpoint, and float64 → float32 would then round to even (1 + 2^-22).
    a, b, c = (
        torch.tensor([1 + 2.0**-23]),
        torch.tensor([2.0**-24 * (1 - 2.0**-23)]),
        torch.tensor([1 + 2.0**-23]),
    )
    assert R.fma_float32(a, b, c).item() == 1 + 2.0**-23
    assert (a.double() * b.double() + c.double()).float().item() == 1 + 2.0**-22
    assert R.fma_float32(a, b, -c).item() == float(exact(a.item(), b.item(), -c.item()))


@pytest.mark.parametrize("m", [1, 2, 5, 8], ids=lambda m: f"M{m}")
@pytest.mark.parametrize("k,gs", [(128, 128), (512, 64), (136, 8)], ids=lambda v: str(v))
def test_fused_gemv_equals_blocked_oracle_bit_for_bit(m, k, gs, generator, device):
    n = 41
    qw = Q.quantize_int4(random_tensor((n, k), generator=generator), gs).to(device)
    x = random_tensor((m, k), generator=generator, device=device)
    bias = random_tensor((n,), generator=generator, device=device)
    fused = K.int4_gemv(x, qw.packed, qw.scales, qw.mins, gs, bias)
    cfg = K.gemv_config(m, k, n, gs)
    oracle = R.int4_gemv_blocked(
        x, qw.packed, qw.scales, qw.mins, gs, block_rows=cfg.block_r, split_rows=cfg.split_rows, bias=bias
    )
    assert torch.equal(fused, oracle), f"max diff {(fused - oracle).abs().max().item():.3e}"


@pytest.mark.parametrize(
    "block_r,split_rows,gs",
    [(1, 0, 64), (4, 0, 64), (128, 0, 64), (4, 8, 64), (2, 6, 8), (8, 24, 64), (16, 16, 128)],
    ids=lambda v: str(v),
)
def test_fused_gemv_other_lanes_and_splits_bit_exact(block_r, split_rows, gs, generator, device):
    # 32 packed rows: splits of 8 (4 full), 6 (a partial last split, groups of one row: scales per
    # row), 24 (a partial last split and steps that straddle no group), 16 (one step per split).
    qw = Q.quantize_int4(random_tensor((19, 256), generator=generator), gs).to(device)
    x = random_tensor((2, 256), generator=generator, device=device)
    bias = random_tensor((19,), generator=generator, device=device)
    cfg = K.GemvConfig(
        block_m=2, block_r=block_r, block_n=16, num_warps=4, num_stages=2, split_rows=split_rows
    )
    fused = K.int4_gemv(x, qw.packed, qw.scales, qw.mins, gs, bias, config=cfg)
    oracle = R.int4_gemv_blocked(
        x, qw.packed, qw.scales, qw.mins, gs, block_rows=block_r, split_rows=split_rows, bias=bias
    )
    assert torch.equal(fused, oracle), f"max diff {(fused - oracle).abs().max().item():.3e}"
    # The arrival counters are left at zero: a second call gives the same bits.
    assert torch.equal(K.int4_gemv(x, qw.packed, qw.scales, qw.mins, gs, bias, config=cfg), fused)


def test_gemv_config_splits_large_layers():
    for m, k, n in [(1, 4096, 11008), (1, 4096, 4096), (1, 11008, 4096), (4, 1024, 1024), (8, 4096, 4096)]:
        cfg = K.gemv_config(m, k, n, 128)
        rows, splits = k // 8, cfg.n_splits(k // 8)
        assert cfg == K.gemv_config(m, k, n, 128)
        assert 1 < splits <= 64 and cfg.split_rows % cfg.block_r == 0 and rows % cfg.split_rows == 0
        assert (splits - 1) * cfg.split_rows < rows <= splits * cfg.split_rows
    assert K.gemv_config(1, 64, 8, 64).n_splits(8) == 1  # too small to split


def test_fused_gemv_reads_strided_inputs(generator, device):
    n, k = 40, 128
    qw = Q.quantize_int4(random_tensor((n, k), generator=generator), 32).to(device)
    x = random_tensor((k, 6), generator=generator, device=device).t()[::2]  # (3, K), non-contiguous
    wide = torch.zeros(k // 8, 2 * n, dtype=torch.int32, device=device)
    wide[:, ::2] = qw.packed
    strided = Q.Int4Weight(wide[:, ::2], qw.scales, qw.mins, 32, (n, k))
    out = Q.int4_linear(x, strided, backend="triton")
    assert torch.equal(out, Q.int4_linear(x.contiguous(), qw, backend="triton"))


def test_fused_gemv_is_deterministic(generator, device):
    qw = Q.quantize_int4(random_tensor((33, 128), generator=generator), 32).to(device)
    x = random_tensor((1, 128), generator=generator, device=device)
    assert torch.equal(Q.int4_linear(x, qw, backend="triton"), Q.int4_linear(x, qw, backend="triton"))


_BF16_CAST_XFAIL = pytest.mark.xfail(
    os.environ.get("NBXSIG_TEST_DEVICE", "cpu") == "cpu",
    raises=AssertionError,
    strict=True,
    reason="Triton 3.6's interpreter truncates float32 → bfloat16 instead of rounding (GPU is fine)",
)


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, pytest.param(torch.bfloat16, marks=_BF16_CAST_XFAIL)], ids=str
)
def test_triton_dequantize_equals_reference_bit_for_bit(dtype, generator, device):
    qw = Q.quantize_int4(random_tensor((150, 192), generator=generator), 64).to(device)
    ours = Q.dequantize_int4(qw, dtype=dtype, backend="triton")
    ref = Q.dequantize_int4(qw.to("cpu"), dtype=dtype, backend="torch")
    assert ours.shape == (150, 192) and ours.dtype == dtype
    assert torch.equal(ours.cpu(), ref)


def test_gemv_path_dispatch(monkeypatch):
    assert [Q.gemv_path(m) for m in (1, 8, 9, 64)] == ["fused_gemv", "fused_gemv"] + ["dequant_matmul"] * 2
    monkeypatch.setattr(Q, "FUSED_GEMM", True)
    assert [Q.gemv_path(m) for m in (1, 8, 9, 64)] == ["fused_gemv", "fused_gemv", "fused_gemm", "fused_gemm"]
    assert Q.gemv_path(64, torch.bfloat16) == "fused_gemm"
    assert [Q.gemv_path(m, torch.float32) for m in (8, 9)] == ["fused_gemv", "dequant_matmul"]
    # A bad row count or dtype is refused by name (a string compared with "<=" inside; -1 and
    # "float16" answered "fused_gemv").
    for bad, name in ((-1, "m"), ("3", "m"), (2.5, "m")):
        with pytest.raises((ParameterValueError, ParameterTypeError), match=f"^{name} must be"):
            Q.gemv_path(bad)
    for dtype in ("float16", torch.int32):
        with pytest.raises(ParameterTypeError, match=r"^dtype must be"):
            Q.gemv_path(3, dtype)


def test_batched_leading_dims(generator, device):
    qw = Q.quantize_int4(random_tensor((24, 64), generator=generator), 32).to(device)
    x = random_tensor((2, 3, 64), generator=generator, device=device)
    out = Q.int4_linear(x, qw, backend="triton")
    assert out.shape == (2, 3, 24)
    assert_close(out, Q.int4_linear(x.cpu().double(), qw.to("cpu"), backend="torch"), dtype="float32")


def test_int4linear_module_and_quantize_model(generator):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 48, bias=False), nn.Linear(48, 5))
    x = random_tensor((4, 64), generator=generator)
    ref = model(x)
    Q.quantize_model(model, group_size=16, skip=("3",))
    assert isinstance(model[0], Q.Int4Linear) and isinstance(model[2], Q.Int4Linear)
    assert isinstance(model[3], nn.Linear)
    out = model(x)
    rel = ((out - ref).norm() / ref.norm()).item()
    assert rel < 0.1, f"int4 model relative error {rel:.3f}"


def test_save_load_int4_weight(tmp_path, generator):
    qw = Q.quantize_int4(random_tensor((24, 64), generator=generator), 32)
    qw.save(tmp_path / "w.safetensors")
    back = Q.Int4Weight.load(tmp_path / "w.safetensors")
    assert back.shape == qw.shape and back.group_size == 32
    for a, b in ((back.packed, qw.packed), (back.scales, qw.scales), (back.mins, qw.mins)):
        assert torch.equal(a, b)


def test_save_load_quantized_model(tmp_path, generator):
    def build():
        torch.manual_seed(1)
        return nn.Sequential(nn.Linear(64, 32), nn.GELU(), nn.Linear(32, 8))

    model = Q.quantize_model(build(), group_size=32)
    Q.save_quantized(model, tmp_path / "m.safetensors")
    other = Q.quantize_model(nn.Sequential(nn.Linear(64, 32), nn.GELU(), nn.Linear(32, 8)), group_size=32)
    Q.load_quantized(other, tmp_path / "m.safetensors")
    x = random_tensor((3, 64), generator=generator)
    assert torch.equal(model(x), other(x))


def test_loading_a_mismatched_file_names_what_differs(tmp_path):
    model = Q.quantize_model(nn.Sequential(nn.Linear(64, 32), nn.GELU(), nn.Linear(32, 8)), group_size=32)
    Q.save_quantized(model, tmp_path / "m.safetensors")
    other = Q.quantize_model(nn.Sequential(nn.Linear(64, 32), nn.GELU(), nn.Linear(32, 8)), group_size=16)
    before = {k: v.clone() for k, v in other.state_dict().items()}
    with pytest.raises(ParameterValueError, match=r"other shape: 0\.mins, 0\.scales"):
        Q.load_quantized(other, tmp_path / "m.safetensors")
    assert all(torch.equal(v, before[k]) for k, v in other.state_dict().items())  # nothing loaded
    with pytest.raises(ParameterValueError, match=r"missing: 0\.weight, 2\.weight; unexpected: 0\.mins"):
        Q.load_quantized(
            nn.Sequential(nn.Linear(64, 32), nn.GELU(), nn.Linear(32, 8)), tmp_path / "m.safetensors"
        )
    Q.quantize_int4(torch.randn(8, 64), 32).save(tmp_path / "w.safetensors")
    with pytest.raises(ParameterValueError, match="written by save_quantized"):
        Q.load_quantized(model, tmp_path / "w.safetensors")
    with pytest.raises(ParameterValueError, match=r"written by Int4Weight.save"):
        Q.Int4Weight.load(tmp_path / "m.safetensors")
    for load in (lambda p: Q.load_quantized(model, p), Q.Int4Weight.load):
        with pytest.raises(ParameterValueError, match="an existing file"):
            load(tmp_path / "absent.safetensors")
    with pytest.raises(ParameterValueError, match="a module with a state"):
        Q.load_quantized(nn.ReLU(), tmp_path / "m.safetensors")


def test_a_shared_linear_saves_once_and_loads_into_both_names(tmp_path, generator):
    # quantize_model keeps a linear shared under two names shared; safetensors refuses tensors that
    # share memory, so the file stores it once with an alias, and loading fills both names.
    def build():
        shared = nn.Linear(32, 16)
        model = nn.Module()
        model.a, model.b, model.c = shared, shared, nn.Linear(32, 16)
        return Q.quantize_model(model, group_size=32)

    torch.manual_seed(3)
    model = build()
    Q.save_quantized(model, tmp_path / "m.safetensors")
    other = build()
    Q.load_quantized(other, tmp_path / "m.safetensors")
    assert other.a is other.b
    for name, tensor in model.state_dict().items():
        assert torch.equal(other.state_dict()[name], tensor), name


def test_a_corrupt_or_misnamed_weight_file_is_a_clear_error(tmp_path):
    (tmp_path / "bad.safetensors").write_bytes(b"not a safetensors file")
    from safetensors.torch import save_file

    qw = Q.quantize_int4(torch.randn(8, 64), 32)
    for shape in ("24", "null"):  # json that tuple() cannot take: a TypeError got through
        meta = {"format": "nbxsig-int4", "group_size": "32", "shape": shape}
        save_file({"packed": qw.packed, "scales": qw.scales, "mins": qw.mins}, tmp_path / "m", metadata=meta)
        with pytest.raises(ParameterValueError, match="an Int4Weight file with valid metadata"):
            Q.Int4Weight.load(tmp_path / "m")
    model = Q.quantize_model(nn.Sequential(nn.Linear(64, 32)), group_size=32)
    for load in (lambda p: Q.load_quantized(model, p), Q.Int4Weight.load):
        with pytest.raises(ParameterValueError, match=r"path must be a safetensors file \(reading it: "):
            load(tmp_path / "bad.safetensors")
    weight = Q.quantize_int4(torch.randn(8, 64), 32)
    for save in (lambda p: Q.save_quantized(model, p), weight.save):
        with pytest.raises(ParameterValueError, match="a file path, not a folder"):
            save(tmp_path)
        with pytest.raises(ParameterTypeError, match="path"):
            save(3)


def test_loading_a_weight_onto_a_bad_device_names_device(tmp_path, generator):
    # safetensors refused these devices, and the error was reported against path.
    path = tmp_path / "w.safetensors"
    weight = Q.quantize_int4(random_tensor((8, 64), generator=generator), 32)
    weight.save(path)
    for device in ("gpu", "meta"):
        with pytest.raises(ParameterValueError, match=f"device must be .*, got .*{device}"):
            Q.Int4Weight.load(path, device=device)
    loaded = Q.Int4Weight.load(path, device=torch.device("cpu"))
    assert_close(Q.dequantize_int4(loaded), Q.dequantize_int4(weight), rtol=0, atol=0)


def test_an_interrupted_save_leaves_the_earlier_file(tmp_path, monkeypatch):
    model = Q.quantize_model(nn.Sequential(nn.Linear(64, 32)), group_size=32)
    target = tmp_path / "m.safetensors"
    Q.save_quantized(model, target)
    before = target.read_bytes()
    real_atomic_open = Q.atomic_open

    @contextlib.contextmanager
    def interrupted_halfway(path):
        with real_atomic_open(path) as f:

            class HalfWrite:
                def write(self, data):
                    f.write(data[: len(data) // 2])
                    raise KeyboardInterrupt

            yield HalfWrite()

    monkeypatch.setattr(Q, "atomic_open", interrupted_halfway)
    for save in (lambda p: Q.save_quantized(model, p), Q.quantize_int4(torch.randn(8, 64), 32).save):
        with pytest.raises(KeyboardInterrupt):
            save(target)
        assert target.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == [target.name]


def test_int4_weight_parts_must_agree():
    # The kernels read packed/scales/mins by the weight's shape and group size alone.
    qw = Q.quantize_int4(torch.randn(24, 64), 32)
    with pytest.raises(ParameterValueError, match=r"scales must be of shape \(4, 24\)"):
        Q.Int4Weight(qw.packed, qw.scales, qw.mins, 16, (24, 64))
    with pytest.raises(ParameterValueError, match="group_size must be a multiple of 8 that divides K=64"):
        Q.Int4Weight(qw.packed, qw.scales, qw.mins, 48, (24, 64))
    with pytest.raises(ParameterTypeError, match=r"mins must be a torch.float16 tensor"):
        Q.Int4Weight(qw.packed, qw.scales, qw.mins.float(), 32, (24, 64))
    with pytest.raises(ParameterValueError, match="shape must be a tuple"):
        Q.Int4Weight(qw.packed, qw.scales, qw.mins, 32, (24, 64, 1))
    with pytest.raises(ParameterValueError, match="mins must be laid out as scales"):
        Q.Int4Weight(qw.packed, qw.scales, qw.mins.t().contiguous().t(), 32, (24, 64))


def test_half_and_bfloat16_modules_keep_the_fp16_scales(generator):
    # Module.to(dtype) casts floating buffers; the format's fp16 scales and mins must not be rounded.
    layer = Q.Int4Linear.from_linear(nn.Linear(64, 24), 32)
    scales, mins = layer.scales.clone(), layer.mins.clone()
    x = random_tensor((3, 64), generator=generator)
    for convert, dtype in ((nn.Module.bfloat16, torch.bfloat16), (nn.Module.double, torch.float64)):
        convert(layer)
        assert layer.bias.dtype == dtype
        assert torch.equal(layer.scales, scales) and torch.equal(layer.mins, mins)
    layer.float()
    ref = x.double() @ Q.dequantize_int4(layer.weight).double().t() + layer.bias.double()
    assert_close(layer(x), ref, dtype="float32")


def test_quantize_model_edge_cases(generator):
    shared = nn.Linear(64, 64)
    model = nn.Sequential(shared, nn.ReLU(), shared)  # one linear under two names: replaced at both
    Q.quantize_model(model, 32)
    assert isinstance(model[0], Q.Int4Linear) and model[0] is model[2]
    model = nn.Sequential(shared, nn.ReLU(), shared)
    Q.quantize_model(model, 32, skip=("2",))  # skipped under either name: stays everywhere
    assert model[0] is shared and model[2] is shared
    # nn.MultiheadAttention reads out_proj.weight as a tensor: its linear stays, the rest is quantized.
    layer = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True, dropout=0.0).eval()
    Q.quantize_model(layer, 32)
    assert isinstance(layer.linear1, Q.Int4Linear) and not isinstance(layer.self_attn.out_proj, Q.Int4Linear)
    assert layer(random_tensor((2, 3, 64), generator=generator)).shape == (2, 3, 64)
    with pytest.raises(ParameterValueError, match=r"Int4Linear.from_linear"):
        Q.quantize_model(nn.Linear(64, 8), 32)
    with pytest.raises(ParameterTypeError, match=r"model must be a torch.nn.Module"):
        Q.quantize_model("model", 32)
    with pytest.raises(ParameterValueError, match="group_size must be a multiple of 8"):
        Q.quantize_model(nn.ReLU(), 12)  # checked even where no layer would use it


def test_quantized_transformer_encoder_runs_in_inference_mode(generator, device):
    # eval() + no_grad is where nn.TransformerEncoder(Layer) takes its fused fast path, which passes
    # linear1.weight to a native kernel as a dense tensor: it raised "argument 'ffn_weight_1' must be
    # Tensor, not Int4Weight". The Int4Weight now makes the layer decline it (has_torch_function).
    torch.manual_seed(5)
    layer = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True, dropout=0.0)
    encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=True)
    encoder = Q.quantize_model(encoder, 32).to(device).eval()
    x = random_tensor((2, 5, 64), generator=generator, device=device)
    mask = torch.tensor([[False] * 5, [False] * 3 + [True] * 2], device=device)
    for kwargs in ({}, {"src_key_padding_mask": mask}):
        ref = encoder(x, **kwargs)  # grad enabled: the layer-by-layer path
        with torch.no_grad():
            out = encoder(x, **kwargs)
        with torch.inference_mode():
            out_inference = encoder.layers[0](x, **kwargs)
        assert_close(out, ref, dtype="float32")
        assert_close(out_inference, encoder.layers[0](x, **kwargs), dtype="float32")


def test_int4_linear_takes_an_empty_batch(generator, device):
    # F.linear maps (0, K) to (0, N); int4_linear refused it ("x must be a non-empty tensor"), so an
    # empty batch (no active streams) failed where the float model ran.
    layer = Q.Int4Linear.from_linear(nn.Linear(64, 24), 32).to(device)
    for shape in ((0, 64), (2, 0, 64)):
        x = random_tensor(shape, generator=generator, device=device).requires_grad_()
        bias = layer.bias.detach().clone().requires_grad_()
        out = Q.int4_linear(x, layer.weight, bias)
        assert out.shape == (*shape[:-1], 24) and out.dtype == x.dtype
        out.sum().backward()
        assert x.grad.shape == x.shape and torch.equal(bias.grad, torch.zeros_like(bias))
        assert layer(x).shape == (*shape[:-1], 24)


def test_quantize_model_skip_takes_exact_linear_names():
    def build():
        return nn.Sequential(nn.Linear(64, 32), nn.Sequential(nn.Linear(32, 32), nn.Linear(32, 8)))

    def floating(model):
        return [name for name, mod in model.named_modules() if isinstance(mod, nn.Linear)]

    # A bare string is one name (it was iterated: skip="1.1" skipped "1" and "." and "1", i.e. nothing).
    assert floating(Q.quantize_model(build(), 32, skip="1.1")) == ["1.1"]
    assert floating(Q.quantize_model(build(), 32, skip=["0", "1.0"])) == ["0", "1.0"]
    # A typo or a container name was ignored silently, quantizing the layer meant to stay.
    for skip in (("head",), ("1",), ("1.*",)):
        with pytest.raises(ParameterValueError, match=r"skip must be qualified names of the model's linears"):
            Q.quantize_model(build(), 32, skip=skip)
    for skip in (None, 3, [0]):
        with pytest.raises(ParameterTypeError, match="skip must be an iterable of qualified module names"):
            Q.quantize_model(build(), 32, skip=skip)
    # Quantizing again is a no-op, and names of layers already int4 are accepted.
    model = Q.quantize_model(build(), 32, skip=("0",))
    assert floating(Q.quantize_model(model, 32, skip=("0", "1.1"))) == ["0"]


def test_a_meta_model_quantizes_to_a_skeleton_that_loads(tmp_path, generator):
    def build():
        return nn.Sequential(nn.Linear(64, 32), nn.GELU(), nn.Linear(32, 8))

    torch.manual_seed(2)
    model = Q.quantize_model(build(), 32)
    Q.save_quantized(model, tmp_path / "m.safetensors")
    # On the meta device quantize_int4 raised torch's "Tensor.item() cannot be called on meta tensors".
    with torch.device("meta"):
        skeleton = build()
    Q.quantize_model(skeleton, 32)
    assert isinstance(skeleton[0], Q.Int4Linear) and skeleton[0].packed.is_meta
    with pytest.raises(ParameterValueError, match=r"model must be a model with allocated tensors"):
        Q.load_quantized(skeleton, tmp_path / "m.safetensors")  # safe_open's error blamed the file
    with pytest.raises(ParameterValueError, match="model must be a model whose tensors hold values"):
        Q.save_quantized(skeleton, tmp_path / "s.safetensors")
    with pytest.raises(ParameterValueError, match="weight must be a tensor with values"):
        Q.quantize_int4(torch.empty(8, 64, device="meta"), 32)
    Q.load_quantized(skeleton.to_empty(device="cpu"), tmp_path / "m.safetensors")
    assert skeleton[0].scales.dtype == torch.float16
    x = random_tensor((3, 64), generator=generator)
    assert torch.equal(skeleton(x), model(x))


def test_loading_an_integer_tensor_of_another_dtype_is_refused(tmp_path):
    # load_state_dict casts: float "packed" words were truncated into other nibbles without a word.
    from safetensors.torch import save_file

    model = Q.quantize_model(nn.Sequential(nn.Linear(64, 32)), group_size=32)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    state["0.packed"] = state["0.packed"].float()
    save_file(state, tmp_path / "m.safetensors", metadata={"format": "nbxsig-quantized-model"})
    before = model[0].packed.clone()
    with pytest.raises(ParameterValueError, match=r"other dtype: 0\.packed"):
        Q.load_quantized(model, tmp_path / "m.safetensors")
    assert torch.equal(model[0].packed, before)
    # Floating tensors may change precision, as load_state_dict does (a .half() model's bias).
    Q.save_quantized(Q.quantize_model(nn.Sequential(nn.Linear(64, 32)), group_size=32).half(), tmp_path / "h")
    assert Q.load_quantized(model, tmp_path / "h")[0].bias.dtype == torch.float32


def test_errors_name_the_problem():
    with pytest.raises(ParameterValueError, match="not a multiple of group_size=128"):
        Q.quantize_int4(torch.randn(8, 200))
    with pytest.raises(ParameterValueError, match="group_size"):
        Q.quantize_int4(torch.randn(8, 60), group_size=12)
    with pytest.raises(ParameterTypeError, match="weight"):
        Q.quantize_int4(torch.randint(0, 3, (8, 128)))
    with pytest.raises(ParameterValueError, match="finite"):
        Q.quantize_int4(torch.full((2, 128), float("nan")))
    qw = Q.quantize_int4(torch.randn(8, 128))
    with pytest.raises(ParameterValueError, match="K=128"):
        Q.int4_linear(torch.randn(2, 64), qw)
    with pytest.raises(ParameterValueError, match="bias"):
        Q.int4_linear(torch.randn(2, 128), qw, torch.randn(7))
    with pytest.raises(ParameterTypeError, match="Int4Weight"):
        Q.int4_linear(torch.randn(2, 128), torch.randn(8, 128))
    with pytest.raises(ParameterValueError, match=r"values in 0\.\.15"):
        Q.pack_int4(torch.full((8, 2), 16))
    with pytest.raises(ParameterValueError, match="layer '0'"):
        Q.quantize_model(nn.Sequential(nn.Linear(60, 4)), group_size=32)
    # These surfaced as torch's own errors (or, for backend, only at the first forward).
    with pytest.raises(ParameterValueError, match="linear must be an initialised linear"):
        Q.Int4Linear.from_linear(nn.LazyLinear(8), 32)
    with pytest.raises(ParameterValueError, match="backend must be None, 'triton' or 'torch'"):
        Q.Int4Linear(128, 8, backend="cuda")
    with pytest.raises(ParameterValueError, match=r"device must be a torch\.device"):
        Q.Int4Linear(128, 8, device="nonsense")
    for device in (torch.float16, "nonsense"):
        with pytest.raises(ParameterValueError, match=r"device must be a torch\.device"):
            qw.to(device)


@pytest.mark.gpu
@pytest.mark.parametrize("pdl", [False, True], ids=["-", "pdl"])
@pytest.mark.parametrize("stages", [None, 3], ids=lambda s: "default" if s is None else f"stages{s}")
@pytest.mark.parametrize("m", [1, 4, 8], ids=lambda m: f"M{m}")
@pytest.mark.parametrize("size", [4096, 1024])
def test_gpu_fused_gemv_bit_exact_large(size, m, stages, pdl, generator, cuda_device, monkeypatch):
    # stages: the K loop software-pipelined (cp.async, only on the GPU) over 8-step splits -- the
    # loads move through shared memory, the arithmetic and its order do not change. pdl: launched
    # with programmatic dependent launch (the GEMV's PDL switch), which moves no arithmetic either;
    # at 1024×1024 the grid is smaller than the SM count, so a PDL launch also prefetches its weights
    # to L2 before the wait (PREFETCH), which reads nothing into the program.
    monkeypatch.setattr(K, "PDL", pdl)
    assert not pdl or pdl_supported(cuda_device)  # an H100/H200: the switch takes effect
    n, k, gs = size, size, 128
    if size == 1024 and stages is None:
        cfg = K.gemv_config(m, k, n, gs)
        assert K.prefetches(cuda_device, -(-n // cfg.block_n) * cfg.n_splits(k // 8))
    qw = Q.quantize_int4(random_tensor((n, k), generator=generator, device=cuda_device), gs)
    x = random_tensor((m, k), generator=generator, device=cuda_device)
    cfg = K.gemv_config(m, k, n, gs)
    if stages is not None:
        cfg = dataclasses.replace(cfg, num_stages=stages, split_rows=8 * cfg.block_r)
    fused = K.int4_gemv(x, qw.packed, qw.scales, qw.mins, gs, config=cfg)
    oracle = R.int4_gemv_blocked(
        x, qw.packed, qw.scales, qw.mins, gs, block_rows=cfg.block_r, split_rows=cfg.split_rows
    )
    assert torch.equal(fused, oracle), f"max diff {(fused - oracle).abs().max().item():.3e}"
    ref = x.double() @ Q.dequantize_int4(qw).double().t()
    assert_close(fused, ref, dtype="float32", rel_error=1e-5)
    # Later calls launch through the cached compiled handle: the same bits, also for an input of
    # another alignment class (a view 4 bytes into its storage) and back.
    shifted = torch.empty(m * k + 1, device=cuda_device)[1:].view(m, k).copy_(x)
    for inp in (x, shifted, x):
        assert torch.equal(K.int4_gemv(inp, qw.packed, qw.scales, qw.mins, gs, config=cfg), fused)


@pytest.mark.gpu
@pytest.mark.parametrize("pdl", [False, True], ids=["-", "pdl"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("split_k", [1, 4], ids=lambda s: f"split{s}")
@pytest.mark.parametrize("m,k,n", [(256, 512, 1536), (256, 1536, 512), (300, 4096, 4096)], ids=str)
def test_gpu_fused_gemm_large(m, k, n, dtype, pdl, split_k, generator, cuda_device, monkeypatch):
    # The compiled dequant-GEMM (wgmma or mma.sync by tile, cp.async pipeline, PDL, a K split's partials
    # and arrival counters) at the streaming step's shapes and a 4096² layer: bfloat16 only runs here
    # (the interpreter's bf16 dot is wrong).
    from nbxsig.kernels import int4_gemm as KM

    monkeypatch.setattr(Q, "FUSED_GEMM", True)
    monkeypatch.setattr(KM, "PDL", pdl)
    config = KM.gemm_config
    split = lambda *shape: dataclasses.replace(config(*shape), split_k=split_k)  # noqa: E731
    monkeypatch.setattr(KM, "gemm_config", split)
    qw = Q.quantize_int4(random_tensor((n, k), generator=generator, device=cuda_device), 128)
    x = random_tensor((m, k), generator=generator, dtype=dtype, device=cuda_device)
    out = Q.int4_linear(x, qw)
    ref = x.double() @ Q.dequantize_int4(qw, dtype=dtype).double().t()
    assert_close(out, ref, dtype=dtype)
    assert torch.equal(Q.int4_linear(x, qw), out)  # deterministic


def test_gemv_cached_launch_passes_options_and_every_parameter(record_cached_launch, generator):
    # The GPU-only cached path, Triton stubbed: the first call of an argument class compiles with the
    # GEMV's compile options (no FMA contraction: the bit-exact contract), later calls pass every
    # kernel parameter to the compiled launcher.
    compiles, runs = record_cached_launch(K._gemv_launch)
    qw = Q.quantize_int4(random_tensor((40, 256), generator=generator), 128)
    x = random_tensor((1, 256), generator=generator)
    for _ in range(3):
        K.int4_gemv(x, qw.packed, qw.scales, qw.mins, 128)
    assert len(compiles) == 1 and len(runs) == 2
    options = compiles[0][1]
    assert options["enable_fp_fusion"] is False and options["num_stages"] >= 1
    assert all(len(args) - 9 == len(K._gemv_launch.params) for args in runs)


def test_directed_fp16_rounding_matches_nextafter(generator):
    x = torch.cat(
        [
            random_tensor((2000,), generator=generator) * 10 ** torch.randint(-9, 4, (2000,)),
            torch.tensor([0.0, -0.0, 1e-8, -1e-8, 2.0, -2.0]),
        ]
    )
    x = x.float()
    h = x.half()
    for direction, inf in (("down", float("-inf")), ("up", float("inf"))):
        ours = R._round_fp16(x, direction=direction)
        toward = torch.full_like(h, inf)
        wrong = h.float() > x if direction == "down" else h.float() < x
        expected = torch.where(wrong, torch.nextafter(h, toward), h)
        assert torch.equal(ours.float(), expected.float()), direction
        assert bool((ours.float() <= x).all() if direction == "down" else (ours.float() >= x).all())
