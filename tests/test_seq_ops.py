"""RMSNorm (alone and after a residual add), rotary embeddings and the SwiGLU gate: the Triton kernels
(interpreter on CPU) against the float64 torch twins."""

from __future__ import annotations

import pytest
import torch

from nbxsig.errors import ParameterTypeError, ParameterValueError
from nbxsig.kernels import rmsnorm as krms
from nbxsig.kernels import rope as krope
from nbxsig.kernels import swiglu as kswiglu
from nbxsig.models import rms_norm, rope
from nbxsig.reference import models as ref
from nbxsig.testing import assert_close, random_tensor

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _twin_rms_norm(x, w, eps):
    return ref.rms_norm(x.double(), w.double(), eps=eps)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    "shape,view",
    [((3, 5, 64), None), ((7, 37), None), ((4, 6, 24), "strided"), ((2, 3, 48), "transposed")],
    ids=["batched-64", "odd-37", "strided", "transposed"],
)
def test_rms_norm_kernel_matches_float64(shape, view, dtype, device, generator):
    x = random_tensor(shape, generator=generator, dtype=dtype, device=device)
    if view == "strided":
        x = x[:, ::2, :]  # rows 2 apart
    elif view == "transposed":
        x = x.transpose(0, 1)  # a non-contiguous (3, 2, 48) view
    w = random_tensor((x.shape[-1],), generator=generator, device=device)
    y = rms_norm(x, w, eps=1e-5, backend="triton")
    assert y.dtype == dtype and y.shape == x.shape
    assert_close(y, _twin_rms_norm(x, w, 1e-5), dtype=dtype)


def test_rms_norm_two_pass_for_wide_rows(device, generator, monkeypatch):
    # Rows wider than a program's tile take the two-pass loop (the sum, then the scaled store).
    monkeypatch.setattr(krms, "MAX_BLOCK_D", 32)
    x = random_tensor((3, 100), generator=generator, device=device)
    w = random_tensor((100,), generator=generator, device=device)
    assert_close(rms_norm(x, w, backend="triton"), _twin_rms_norm(x, w, 1e-6), dtype=torch.float32)


def test_rms_norm_gradient(device, generator):
    x = random_tensor((4, 24), generator=generator, device=device).requires_grad_()
    w = random_tensor((24,), generator=generator, device=device).requires_grad_()
    g = random_tensor((4, 24), generator=generator, device=device)
    gx, gw = torch.autograd.grad(rms_norm(x, w, backend="triton"), (x, w), g)
    xd, wd = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    ex, ew = torch.autograd.grad(ref.rms_norm(xd, wd, eps=1e-6), (xd, wd), g.double())
    assert_close(gx, ex, dtype=torch.float32)
    assert_close(gw, ew, dtype=torch.float32)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    "shape,view,max_block",
    [
        ((3, 5, 64), None, 4096),
        ((7, 37), "strided", 4096),
        ((2, 3, 48), "transposed", 4096),
        ((3, 100), None, 32),
    ],
    ids=["batched-64", "odd-37-strided", "transposed", "two-pass"],
)
def test_add_rms_norm_kernel_matches_float64(shape, view, max_block, dtype, device, generator, monkeypatch):
    # The decode step's residual add + next norm: the sum rounded to the dtype (torch's add), stored,
    # and normalised; rows wider than a tile recompute the sum in the second pass.
    monkeypatch.setattr(krms, "MAX_BLOCK_D", max_block)
    x, r = (random_tensor(shape, generator=generator, dtype=dtype, device=device) for _ in "xr")
    if view == "strided":
        x = random_tensor((shape[0], 2 * shape[1]), generator=generator, dtype=dtype, device=device)[:, ::2]
    elif view == "transposed":
        x, r = x.transpose(0, 1), r.transpose(0, 1)
    w = random_tensor((x.shape[-1],), generator=generator, device=device)
    total, y = krms.add_rms_norm(x, r, w, eps=1e-5)
    assert total.dtype == y.dtype == dtype and total.shape == y.shape == x.shape
    # The sum is one rounding of an exact float32 sum: equal to torch's add of the same inputs.
    assert_close(total, (x.double() + r.double()).to(dtype), dtype=dtype)
    assert_close(y, _twin_rms_norm(x + r, w, 1e-5), dtype=dtype)
    ref_total, ref_y = ref.add_rms_norm(x, r, w, eps=1e-5)
    assert_close(total, ref_total, dtype=dtype)
    assert_close(y, ref_y, dtype=dtype)


def test_add_rms_norm_refuses_a_broadcast_residual():
    x = torch.randn(4, 8)
    with pytest.raises(ParameterValueError, match="residual"):
        krms.add_rms_norm(x, torch.randn(8), torch.ones(8), eps=1e-6)
    with pytest.raises(ParameterValueError, match="residual"):
        krms.add_rms_norm(x, torch.randn(4, 8, dtype=torch.float64), torch.ones(8), eps=1e-6)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    "shape,view", [((3, 5, 2 * 48), None), ((7, 2 * 37), "strided"), ((2, 2 * 1100), None)],
    ids=["batched", "odd-strided", "wide"],
)  # fmt: skip
def test_silu_mul_kernel_matches_float64(shape, view, dtype, device, generator):
    gu = random_tensor(shape, generator=generator, dtype=dtype, device=device, low=-6.0, high=6.0)
    if view == "strided":
        gu = random_tensor((shape[0], 3, shape[1]), generator=generator, dtype=dtype, device=device)[:, 1]
    y = kswiglu.silu_mul(gu)
    assert y.dtype == dtype and y.shape == (*shape[:-1], shape[-1] // 2)
    gate, up = gu.double().chunk(2, dim=-1)
    # torch rounds the silu to the dtype before the product (two launches); so does the kernel.
    silu = torch.nn.functional.silu(gate).to(dtype).double()
    assert_close(y, silu * up, dtype=dtype)
    assert_close(y, ref.silu_mul(gu), dtype=dtype)


def test_silu_mul_refuses_an_odd_width(device):
    with pytest.raises(ParameterValueError, match="gate_up"):
        kswiglu.silu_mul(torch.randn(2, 7, device=device))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    "shape,positions",
    [((2, 7, 3, 16), "per-time"), ((5, 4, 10), "per-row-large"), ((3, 6, 5, 8), "transposed")],
    ids=["BTHD", "step-odd-half", "transposed"],
)
def test_rope_kernel_matches_float64(shape, positions, dtype, device, generator):
    x = random_tensor(shape, generator=generator, dtype=dtype, device=device)
    if positions == "per-time":
        pos = torch.arange(shape[1], device=device)  # broadcasts against (B, T)
    elif positions == "per-row-large":
        pos = torch.randint(0, 200_000, (shape[0],), generator=generator).to(device)  # one stream each
    else:
        x = x.transpose(1, 2)  # (B, H, T, D) view read as (B, H) rows of T "heads"
        pos = torch.arange(shape[0] * shape[2], device=device).view(shape[0], shape[2]).float()
    y = rope(x, pos, 10000.0, backend="triton")
    inv_freq = ref.rope_frequencies(x.shape[-1], 10000.0, device)
    assert y.dtype == dtype and y.shape == x.shape
    # The angles are the twin's float32 values; cos/sin of them may differ in the last bit.
    assert_close(y, ref.rope(x.double(), pos, inv_freq), dtype=dtype)


def test_rope_gradient(device, generator):
    x = random_tensor((2, 5, 3, 8), generator=generator, device=device).requires_grad_()
    pos = torch.arange(5, device=device)
    g = random_tensor((2, 5, 3, 8), generator=generator, device=device)
    (gx,) = torch.autograd.grad(rope(x, pos, 500.0, backend="triton"), x, g)
    xd = x.detach().double().requires_grad_()
    (ex,) = torch.autograd.grad(ref.rope(xd, pos, ref.rope_frequencies(8, 500.0, device)), xd, g.double())
    assert_close(gx, ex, dtype=torch.float32)


@pytest.mark.parametrize("op", ["rms_norm", "rope"])
def test_second_derivatives_match_the_torch_backend(op, device, generator):
    # create_graph=True through the Triton backend: rms_norm's backward recomputed its twin on detached
    # copies (gradients with no graph: torch's RuntimeError on the second grad), rope's ran the bare
    # kernel (cut from the graph: a silently wrong second derivative, a third of the torch one's norm).
    x = random_tensor((4, 3, 2, 8), generator=generator, device=device)
    w = random_tensor((8,), generator=generator, device=device)
    pos = torch.arange(3, device=device)
    results = {}
    for backend, dtype in (("torch", torch.float64), ("triton", torch.float32)):
        xs, ws = x.to(dtype).requires_grad_(), w.to(dtype).requires_grad_()
        leaves = (xs, ws) if op == "rms_norm" else (xs,)
        if op == "rms_norm":
            y = rms_norm(xs * xs, ws, backend=backend)
        else:
            y = rope(xs * xs, pos, backend=backend)
        first = torch.autograd.grad(y.square().sum(), leaves, create_graph=True)
        results[backend] = torch.autograd.grad(sum(g.square().sum() for g in first), leaves)
    for got, want in zip(results["triton"], results["torch"], strict=True):
        assert_close(got, want, dtype=torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_rope_and_cache_kernel_matches_twin(dtype, device, generator):
    # A decode step's fused rotation + cache write: q returned rotated, k rotated and v copied into
    # slot pos % slots of layer 1's views (positions past the ring wrap); every other slot and layer
    # keeps its values. Odd half-width (D 10), a strided q.
    b, hq, hkv, d, slots = 5, 4, 2, 10, 3
    q = random_tensor((b, d, hq), generator=generator, dtype=dtype, device=device).transpose(1, 2)
    k = random_tensor((b, hkv, d), generator=generator, dtype=dtype, device=device)
    v = random_tensor((b, hkv, d), generator=generator, dtype=dtype, device=device)
    pos = torch.tensor([0, 2, 3, 7, 11], device=device)
    inv_freq = ref.rope_frequencies(d, 10000.0, device)
    shape = (2, b, hkv, slots, d)  # (layers, B, Hkv, slots, D), as KVCache holds them
    caches = [random_tensor(shape, generator=generator, dtype=dtype, device=device) for _ in "kv"]
    expected = [c.clone() for c in caches]
    q_ref = ref.rope_and_cache(q, k, v, pos, inv_freq, expected[0][1], expected[1][1])
    q_out = krope.rope_and_cache(q, k, v, pos, inv_freq, caches[0][1], caches[1][1])
    assert_close(q_out, q_ref, dtype=dtype)
    for got, want in zip(caches, expected, strict=True):
        assert_close(got, want, dtype=dtype)
    written = torch.zeros(2, b, slots, dtype=torch.bool)
    written[1, torch.arange(b), pos.cpu() % slots] = True
    untouched = ~written[:, :, None, :, None].expand(2, b, hkv, slots, d)
    assert torch.equal(caches[1].cpu()[untouched], expected[1].cpu()[untouched])
    # A cache whose head_dim is strided cannot be written in place by the kernel: refused, unchanged.
    strided = random_tensor((b, hkv, slots, 2 * d), generator=generator, dtype=dtype, device=device)[..., ::2]
    before = strided.clone()
    with pytest.raises(
        ParameterValueError, match="k_cache must be a cache with a unit stride along head_dim"
    ):
        krope.rope_and_cache(q, k, v, pos, inv_freq, strided, caches[1][1])
    assert torch.equal(strided, before)


def test_errors():
    x = torch.randn(2, 3, 8)
    with pytest.raises(ParameterValueError, match="weight"):
        rms_norm(x, torch.ones(7))
    with pytest.raises(ParameterValueError, match="eps"):
        rms_norm(x, torch.ones(8), eps=-1.0)
    with pytest.raises(ParameterTypeError, match="x"):
        rms_norm(torch.ones(2, 8, dtype=torch.int32), torch.ones(8))
    with pytest.raises(ParameterValueError, match="even head dim"):
        rope(torch.randn(2, 3, 7), torch.arange(2))
    with pytest.raises(ParameterValueError, match="broadcastable"):
        rope(torch.randn(2, 5, 3, 8), torch.arange(4))
    with pytest.raises(ParameterTypeError, match="pos"):
        rope(x, torch.ones(2, dtype=torch.bool))
    with pytest.raises(ParameterValueError, match="base"):
        rope(x, torch.arange(2), 0.0)
