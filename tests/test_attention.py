"""Decode attention vs a float64 softmax reference; the KV cache."""

from __future__ import annotations

import math

import pytest
import torch
from _marks import BF16_DOT_XFAIL

from nbxsig.attention import KVCache, decode_attention
from nbxsig.errors import ParameterTypeError, ParameterValueError
from nbxsig.kernels import decode_attention as K
from nbxsig.reference import attention as R
from nbxsig.testing import assert_close, random_tensor


def _naive(q, k, v, lengths=None, bias=None, scale=None):
    """Loop-per-head float64 softmax: independent of the reference's einsum formulation."""
    q, k, v = q.double().cpu(), k.double().cpu(), v.double().cpu()
    b, hq, d = q.shape
    hkv, t = k.shape[1], k.shape[2]
    scale = 1 / math.sqrt(d) if scale is None else scale
    out = torch.zeros(b, hq, v.shape[-1], dtype=torch.float64)
    for i in range(b):
        n = t if lengths is None else int(lengths[i])
        for h in range(hq):
            kv = h // (hq // hkv)
            s = k[i, kv, :n] @ q[i, h] * scale
            if bias is not None:
                s = s + bias[min(i, bias.shape[0] - 1), :n].double().cpu()
            if n:
                out[i, h] = torch.softmax(s, 0) @ v[i, kv, :n]
    return out


CASES = [
    # B, Hq, Hkv, T, D, Dv
    (1, 4, 4, 33, 64, 64),
    (2, 8, 2, 100, 64, 64),
    (3, 6, 1, 70, 127, 127),
    (2, 4, 2, 65, 128, 128),
    (2, 2, 1, 40, 129, 96),
    (1, 4, 2, 24, 256, 256),
]


def _id(c):
    return "B{}-Hq{}-Hkv{}-T{}-D{}-Dv{}".format(*c)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_decode_attention_matches_float64_softmax(case, dtype, generator, device):
    b, hq, hkv, t, d, dv = case
    q = random_tensor((b, hq, d), generator=generator, dtype=dtype, device=device)
    k = random_tensor((b, hkv, t, d), generator=generator, dtype=dtype, device=device)
    v = random_tensor((b, hkv, t, dv), generator=generator, dtype=dtype, device=device)
    lengths = torch.randint(1, t + 1, (b,), generator=generator).to(device)
    bias = random_tensor((b, t), generator=generator, device=device)
    out = decode_attention(q, k, v, lengths=lengths, bias=bias, backend="triton")
    assert out.shape == (b, hq, dv) and out.dtype == dtype
    ref = _naive(q, k, v, lengths, bias)
    tol = 1e-5 if dtype == torch.float32 else 2e-3
    assert_close(out, ref, atol=tol, rtol=tol)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_strided_cache_views_without_copy(backend, generator, device):
    # A preallocated (layers, B, Hkv, capacity, D) cache: attend over the first T slots of layer 1.
    store = random_tensor((2, 3, 2, 50, 64), generator=generator, device=device)
    values = random_tensor((2, 3, 2, 50, 48), generator=generator, device=device)
    k, v = store[1, :, :, :37], values[1, :, :, :37]
    assert not k.is_contiguous()
    q = random_tensor((3, 4, 64), generator=generator, device=device)
    out = decode_attention(q, k, v, backend=backend)
    assert_close(out, _naive(q, k, v), atol=1e-5, rtol=1e-5)
    # A transposed (T, D) layout: keys strided along D.
    kt = random_tensor((3, 2, 64, 37), generator=generator, device=device).transpose(2, 3)
    assert_close(decode_attention(q, kt, v, backend=backend), _naive(q, kt, v), atol=1e-5, rtol=1e-5)


def test_bias_broadcast_and_scale(generator, device):
    q = random_tensor((2, 4, 32), generator=generator, device=device)
    k = random_tensor((2, 2, 20, 32), generator=generator, device=device)
    v = random_tensor((2, 2, 20, 32), generator=generator, device=device)
    bias = random_tensor((1, 20), generator=generator, device=device)
    bias[0, 3] = float("-inf")
    out = decode_attention(q, k, v, bias=bias, scale=0.3, backend="triton")
    assert_close(out, _naive(q, k, v, bias=bias, scale=0.3), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_empty_rows_give_zeros_not_nan(backend, generator, device):
    # 3 splits of 64 per row: row 0 has no valid key in any split, row 2 none in splits 1 and 2.
    assert K.split_config(3, 1, 2, 130, 16, 16).n_splits == 3
    q = random_tensor((3, 2, 16), generator=generator, device=device)
    k = random_tensor((3, 1, 130, 16), generator=generator, device=device)
    v = random_tensor((3, 1, 130, 16), generator=generator, device=device)
    lengths = torch.tensor([0, 130, 1], device=device)
    out = decode_attention(q, k, v, lengths=lengths, backend=backend)
    assert torch.equal(out[0].cpu(), torch.zeros(2, 16))
    assert_close(out, _naive(q, k, v, lengths), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_non_contiguous_lengths(backend, generator, device):
    # A strided view (every other entry): the kernel read lengths[b] at len_ptr + b, i.e. [5, 9].
    q = random_tensor((2, 4, 16), generator=generator, device=device)
    k = random_tensor((2, 2, 10, 16), generator=generator, device=device)
    v = random_tensor((2, 2, 10, 8), generator=generator, device=device)
    for dtype in (torch.int64, torch.int32):
        lengths = torch.tensor([5, 9, 3, 9], dtype=dtype, device=device)[::2]
        assert not lengths.is_contiguous()
        out = decode_attention(q, k, v, lengths=lengths, backend=backend)
        assert_close(out, _naive(q, k, v, lengths), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("t", [20, 70], ids=lambda t: f"T{t}")  # one split, two splits
def test_nan_gives_nan_and_only_an_empty_row_gives_zeros(t, backend, generator, device):
    # Row 0: a NaN bias on a valid key; row 1: a NaN query head (its group partner stays finite);
    # row 2: no valid key, the NaN bias past its length is never read. The guard against an empty
    # sum turned NaN into zeros (NaN > 0 is false), hiding a broken input as "no key".
    q = random_tensor((3, 2, 16), generator=generator, device=device)
    k = random_tensor((3, 1, t, 16), generator=generator, device=device)
    v = random_tensor((3, 1, t, 16), generator=generator, device=device)
    bias = random_tensor((3, t), generator=generator, device=device)
    bias[0, 2] = bias[2, 0] = float("nan")
    q[1, 1, 3] = float("nan")
    lengths = torch.tensor([t, t - 1, 0], device=device)
    out = decode_attention(q, k, v, lengths=lengths, bias=bias, backend=backend)
    want = _naive(q, k, v, lengths, bias)
    assert want[0].isnan().all() and want[1, 1].isnan().all() and not want[1, 0].isnan().any()
    assert_close(out, want, atol=1e-5, rtol=1e-5)  # NaN must meet NaN, zeros zeros


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_slots_past_lengths_are_never_read(backend, generator, device):
    # A preallocated cache holds garbage past each row's length (torch.empty: NaN, inf). The torch
    # path multiplied those values by p = 0 (0·NaN = NaN) and returned NaN.
    q = random_tensor((3, 4, 16), generator=generator, device=device)
    k = random_tensor((3, 2, 70, 16), generator=generator, device=device)
    v = random_tensor((3, 2, 70, 8), generator=generator, device=device)
    lengths = torch.tensor([3, 70, 0], device=device)
    for i, n in enumerate(lengths.tolist()):
        k[i, :, n:] = float("inf")
        v[i, :, n:] = float("nan")
    out = decode_attention(q, k, v, lengths=lengths, backend=backend)
    assert_close(out, _naive(q, k, v, lengths), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_slots_past_lengths_do_not_reach_the_gradients(backend, generator, device):
    # The output ignored the garbage past each row's length, but q's gradient is Σ_t ∂s_t·k_t with
    # ∂s_t = 0 there, and 0·inf is NaN: q.grad was NaN (both backends: Triton's backward recomputes
    # the torch path). Reference: the same cache with the garbage zeroed.
    q = random_tensor((3, 4, 16), generator=generator, device=device)
    k = random_tensor((3, 2, 70, 16), generator=generator, device=device)
    v = random_tensor((3, 2, 70, 8), generator=generator, device=device)
    bias = random_tensor((3, 70), generator=generator, device=device)
    lengths = torch.tensor([3, 70, 0], device=device)
    clean_k, clean_v = k.clone(), v.clone()
    for i, n in enumerate(lengths.tolist()):
        k[i, :, n:], clean_k[i, :, n:] = float("inf"), 0.0
        v[i, :, n:], clean_v[i, :, n:] = float("nan"), 0.0
    grads = {}
    for name, kv in (("garbage", (k, v)), ("clean", (clean_k, clean_v))):
        leaves = [x.clone().requires_grad_() for x in (q, *kv, bias)]
        out = decode_attention(*leaves[:3], lengths=lengths, bias=leaves[3], backend=backend)
        grads[name] = torch.autograd.grad(out.square().sum(), leaves)
    for got, want in zip(grads["garbage"], grads["clean"], strict=True):
        assert_close(got, want, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_bias_at_the_float32_limits(backend, generator, device):
    # torch.finfo(float32).min as a mask value (as transformers fills masks): finite, so a row of only
    # such keys is the mean of V (torch.softmax's answer), and finfo.max selects its key. The kernel's
    # bias·log2(e) overflowed to -inf (row 0: zeros) and +inf (row 2: NaN).
    lo, hi = torch.finfo(torch.float32).min, torch.finfo(torch.float32).max
    q = random_tensor((3, 2, 16), generator=generator, device=device)
    k = random_tensor((3, 1, 20, 16), generator=generator, device=device)
    v = random_tensor((3, 1, 20, 16), generator=generator, device=device)
    bias = random_tensor((3, 20), generator=generator, device=device)
    bias[0] = lo
    bias[1, ::2] = lo
    bias[2, 7] = hi
    bias[1, 1] = float("-inf")  # still masks
    out = decode_attention(q, k, v, bias=bias, backend=backend)
    assert_close(out, _naive(q, k, v, bias=bias), atol=1e-5, rtol=1e-5)


def test_triton_backend_is_differentiable(generator, device):
    # The Triton output had no grad_fn (inputs requiring grad were silently cut from the graph, while
    # the torch backend differentiates); now its backward recomputes the torch path. Reference: the
    # torch backend in float64 (gradchecked), first and second derivatives.
    q = random_tensor((2, 4, 16), generator=generator, device=device)
    k = random_tensor((2, 2, 70, 16), generator=generator, device=device)
    v = random_tensor((2, 2, 70, 8), generator=generator, device=device)
    bias = random_tensor((2, 70), generator=generator, device=device)
    lengths = torch.tensor([70, 33], device=device)
    grad = random_tensor((2, 4, 8), generator=generator, dtype=torch.float64, device=device)
    results = {}
    for backend, dtype in (("torch", torch.float64), ("triton", torch.float32)):
        leaves = [x.to(dtype).requires_grad_() for x in (q, k, v, bias)]
        out = decode_attention(*leaves[:3], lengths=lengths, bias=leaves[3], backend=backend)
        first = torch.autograd.grad(out, leaves, grad.to(dtype), create_graph=True)
        second = torch.autograd.grad(first[0].square().sum(), (leaves[1], leaves[3]))
        results[backend] = (out, *first, *second)
    assert torch.autograd.gradcheck(
        lambda *x: decode_attention(
            *x[:3], lengths=torch.tensor([3], device=device), bias=x[3], backend="torch"
        ),
        [x.double().requires_grad_() for x in (q[1:], k[1:, :, :5], v[1:, :, :5], bias[1:, :5])],
    )
    for got, want in zip(results["triton"], results["torch"], strict=True):
        assert_close(got, want, atol=1e-5, rtol=1e-5)
    # Only what requires grad gets one; no_grad launches without an autograd node.
    vg = v.clone().requires_grad_()
    (gv,) = torch.autograd.grad(decode_attention(q, k, vg, backend="triton"), vg, grad.float())
    (want,) = torch.autograd.grad(decode_attention(q, k, vg, backend="torch"), vg, grad.float())
    assert_close(gv, want, atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        assert decode_attention(q, k, vg, backend="triton").grad_fn is None


def test_kernel_clamps_int64_lengths_before_narrowing(generator, device):
    # On CUDA lengths are not checked (no host sync) but clamped to 0..T; the kernel cast an int64
    # length to int32 first, so 2**32 + 3 read as 3 keys and -(2**32) + 3 as 3 instead of none.
    q = random_tensor((3, 2, 16), generator=generator, device=device)
    k = random_tensor((3, 1, 70, 16), generator=generator, device=device)
    v = random_tensor((3, 1, 70, 16), generator=generator, device=device)
    huge = torch.tensor([2**32 + 3, -(2**32) + 3, 5], device=device)
    out = K.decode_attention(q, k, v, lengths=huge, scale=0.25)
    assert_close(out, _naive(q, k, v, torch.tensor([70, 0, 5]), scale=0.25), atol=1e-5, rtol=1e-5)


def _long_row(generator, device, dtype):
    q = random_tensor((1, 2, 32), generator=generator, dtype=dtype, device=device)
    k = random_tensor((1, 1, 1300, 32), generator=generator, dtype=dtype, device=device)
    v = random_tensor((1, 1, 1300, 32), generator=generator, dtype=dtype, device=device)
    return q, k, v


def test_many_splits_and_determinism(generator, device):
    q, k, v = _long_row(generator, device, torch.float16)
    cfg = K.split_config(1, 1, 2, 1300, 32, 32)
    assert cfg.n_splits > 16  # many partials merged by the last program
    a = decode_attention(q, k, v, backend="triton")
    assert torch.equal(a, decode_attention(q, k, v, backend="triton"))
    assert_close(a, _naive(q, k, v), dtype=torch.float16)


def test_merge_in_several_chunks(generator, device):
    # G=4, Dv=128: the merge takes 16 splits per chunk, and T=1300 has 21 splits of 64.
    q = random_tensor((1, 4, 128), generator=generator, device=device)
    k = random_tensor((1, 1, 1300, 128), generator=generator, device=device)
    v = random_tensor((1, 1, 1300, 128), generator=generator, device=device)
    assert K.split_config(1, 1, 4, 1300, 128, 128).n_splits == 21
    lengths = torch.tensor([1234], device=device)
    out = decode_attention(q, k, v, lengths=lengths, backend="triton")
    assert_close(out, _naive(q, k, v, lengths), atol=1e-5, rtol=1e-5)
    assert torch.equal(out, decode_attention(q, k, v, lengths=lengths, backend="triton"))


def test_more_than_64_splits_explicit_config(generator, device):
    # 82 splits of 16 keys (an explicit config: the automatic one stops at 64): six merge chunks.
    q, k, v = _long_row(generator, device, torch.float32)
    cfg = K.SplitConfig(split=16, n_splits=82, block_t=16, block_g=16, block_d=32, block_dv=32, num_warps=4)
    lengths = torch.tensor([1111], device=device)
    out = K.decode_attention(q, k, v, lengths=lengths, scale=32**-0.5, config=cfg)
    assert_close(out, _naive(q, k, v, lengths), atol=1e-5, rtol=1e-5)


def test_q_in_loop_gives_the_default_bits(generator, device, monkeypatch):
    """The ``Q_IN_LOOP`` switch moves a load, never arithmetic: the same bits as with it off."""
    # Two merge chunks (G=4, Dv=128, 21 splits) with lengths; odd D with lengths, bias and an empty
    # row; a mask-free one-split row.
    q = random_tensor((2, 4, 128), generator=generator, dtype=torch.float16, device=device)
    k = random_tensor((2, 1, 1300, 128), generator=generator, dtype=torch.float16, device=device)
    v = random_tensor((2, 1, 1300, 128), generator=generator, dtype=torch.float16, device=device)
    lengths = torch.tensor([1234, 700], device=device)
    q2 = random_tensor((3, 6, 127), generator=generator, device=device)
    k2 = random_tensor((3, 2, 70, 127), generator=generator, device=device)
    v2 = random_tensor((3, 2, 70, 127), generator=generator, device=device)
    lengths2, bias2 = (
        torch.tensor([0, 70, 33], device=device),
        random_tensor((3, 70), generator=generator, device=device),
    )
    q3 = random_tensor((1, 8, 64), generator=generator, device=device)
    k3 = random_tensor((1, 2, 64, 64), generator=generator, device=device)
    v3 = random_tensor((1, 2, 64, 64), generator=generator, device=device)

    def outputs():
        return (
            decode_attention(q, k, v, lengths=lengths, backend="triton"),
            decode_attention(q2, k2, v2, lengths=lengths2, bias=bias2, backend="triton"),
            decode_attention(q3, k3, v3, backend="triton"),
        )

    monkeypatch.setattr(K, "Q_IN_LOOP", False)
    want = outputs()
    monkeypatch.setattr(K, "Q_IN_LOOP", True)
    got = outputs()
    monkeypatch.setattr(K, "Q_IN_LOOP", None)  # the default: on for the split rows only
    auto = outputs()
    for a, b, c in zip(got, want, auto, strict=True):
        assert torch.equal(a, b) and torch.equal(c, b)
    assert_close(got[0], _naive(q, k, v, lengths), dtype=torch.float16)
    assert_close(got[1], _naive(q2, k2, v2, lengths2, bias2), atol=1e-5, rtol=1e-5)
    assert_close(got[2], _naive(q3, k3, v3), atol=1e-5, rtol=1e-5)


def test_q_in_loop_default_follows_the_split(monkeypatch):
    # Measured on the H200: a gain wherever a row has several splits, a loss with one long split.
    assert K.Q_IN_LOOP is None
    assert K.q_in_loop(16) and K.q_in_loop(2) and not K.q_in_loop(1)
    for forced in (True, False):
        monkeypatch.setattr(K, "Q_IN_LOOP", forced)
        assert K.q_in_loop(16) is forced and K.q_in_loop(1) is forced


def test_mask_free_path(generator, device):
    # T a multiple of the split, no lengths, power-of-two head dims: no masks compiled in; bias -inf
    # on a whole split of one row still gives finite, correct outputs.
    q = random_tensor((2, 8, 64), generator=generator, device=device)
    k = random_tensor((2, 2, 256, 64), generator=generator, device=device)
    v = random_tensor((2, 2, 256, 64), generator=generator, device=device)
    bias = random_tensor((2, 256), generator=generator, device=device)
    bias[1, :64] = float("-inf")
    assert K.split_config(2, 2, 4, 256, 64, 64).n_splits == 4
    out = decode_attention(q, k, v, bias=bias, backend="triton")
    assert_close(out, _naive(q, k, v, bias=bias), atol=1e-5, rtol=1e-5)


@BF16_DOT_XFAIL
def test_bfloat16(generator, device):
    q, k, v = _long_row(generator, device, torch.bfloat16)
    assert_close(decode_attention(q, k, v, backend="triton"), _naive(q, k, v), dtype=torch.bfloat16)


def test_reference_backend_float64_matches_naive(generator):
    q = random_tensor((2, 6, 20), generator=generator, dtype=torch.float64)
    k = random_tensor((2, 3, 17, 20), generator=generator, dtype=torch.float64)
    v = random_tensor((2, 3, 17, 9), generator=generator, dtype=torch.float64)
    lengths = torch.tensor([5, 17])
    out = decode_attention(q, k, v, lengths=lengths, backend="torch")
    assert_close(out, _naive(q, k, v, lengths), dtype=torch.float64)


def test_split_config_is_pure_and_covers_t():
    for b, hkv, t in [(1, 8, 4096), (16, 8, 4096), (64, 8, 2048), (1, 8, 32768), (2, 1, 7)]:
        cfg = K.split_config(b, hkv, 4, t, 128, 128)
        assert cfg == K.split_config(b, hkv, 4, t, 128, 128)
        assert cfg.n_splits <= 64  # the last program of a row merges every split
        assert cfg.split % cfg.block_t == 0 and cfg.n_splits * cfg.split >= t > (cfg.n_splits - 1) * cfg.split


def test_errors_name_the_problem():
    q, k = torch.randn(2, 4, 16), torch.randn(2, 2, 10, 16)
    with pytest.raises(ParameterValueError, match="multiple of k_cache's 3 KV heads"):
        decode_attention(q, torch.randn(2, 3, 10, 16), torch.randn(2, 3, 10, 16))
    with pytest.raises(ParameterValueError, match="v_cache"):
        decode_attention(q, k, torch.randn(2, 2, 11, 16))
    with pytest.raises(ParameterValueError, match="lengths"):
        decode_attention(q, k, k, lengths=torch.tensor([3, 11]))
    with pytest.raises(ParameterValueError, match="bias"):
        decode_attention(q, k, k, bias=torch.randn(2, 9))
    with pytest.raises(ParameterTypeError, match="k_cache"):
        decode_attention(q, k.half(), k)
    with pytest.raises(ParameterValueError, match="at most 256"):
        decode_attention(torch.randn(1, 1, 300), torch.randn(1, 1, 4, 300), torch.randn(1, 1, 4, 300))


def test_kv_cache_ring_and_lengths(generator):
    cache = KVCache(2, n_layers=2, n_kv_heads=1, head_dim=4, capacity=8, window=3)
    assert cache.k.shape == (2, 2, 1, 3, 4)
    for step in range(5):
        kv = torch.full((2, 1, 4), float(step))
        cache.write(1, kv, -kv)
        assert cache.lengths().tolist() == [min(step + 1, 3)] * 2
        cache.advance()
    # Tokens 2, 3, 4 remain, at slots 2, 0, 1.
    assert cache.keys(1)[0, 0, :, 0].tolist() == [3.0, 4.0, 2.0]
    assert cache.values(1)[0, 0, :, 0].tolist() == [-3.0, -4.0, -2.0]
    cache.reset()
    assert cache.lengths().tolist() == [1, 1]
    with pytest.raises(ParameterValueError, match="capacity"):
        KVCache(1, 1, 1, 4, capacity=2, window=3)


def test_kv_cache_refuses_bad_layers_writes_and_a_full_write():
    cache = KVCache(2, n_layers=2, n_kv_heads=1, head_dim=4, capacity=2)
    kv = torch.ones(2, 1, 4)
    # Raw IndexError/RuntimeError before, and -1 silently meant the last layer.
    for layer in (2, -1):
        for method, args in (("keys", ()), ("values", ()), ("write", (kv, kv))):
            with pytest.raises(ParameterValueError, match=r"layer must be in 0\.\.1"):
                getattr(cache, method)(layer, *args)
    with pytest.raises(ParameterTypeError, match="layer must be an integer"):
        cache.keys(1.0)
    # A (1, H, D) key was broadcast to every stream; a wrong head dim raised torch's shape error.
    for bad in (torch.ones(1, 1, 4), torch.ones(2, 1, 5)):
        with pytest.raises(ParameterValueError, match=r"k must be a \(batch, n_kv_heads, head_dim\)"):
            cache.write(0, bad, kv)
    with pytest.raises(ParameterTypeError, match="v must be a tensor of dtype"):
        cache.write(0, kv, torch.ones(2, 1, 4, dtype=torch.int64))
    with pytest.raises(ParameterValueError, match="device"):
        KVCache(1, 1, 1, 4, 4, device="nope")
    # Without a window, a write past capacity replaced the oldest token (slot pos % capacity) silently.
    for step in range(2):
        cache.write(0, kv * step, kv)
        cache.advance()
    with pytest.raises(ParameterValueError, match="capacity=2"):
        cache.write(0, kv * 9, kv)
    assert_close(cache.keys(0)[:, 0, :, 0], torch.tensor([[0.0, 1.0], [0.0, 1.0]]), atol=0, rtol=0)
    cache.reset()
    cache.write(0, kv * 9, kv)  # room again


@pytest.mark.gpu
@pytest.mark.parametrize("b,t", [(1, 4096), (16, 4096), (1, 32768), (3, 1000)], ids=lambda v: str(v))
def test_gpu_decode_attention_large(b, t, generator, cuda_device):
    hq, hkv, d = 32, 8, 128
    q = random_tensor((b, hq, d), generator=generator, dtype=torch.float16, device=cuda_device)
    k = random_tensor((b, hkv, t, d), generator=generator, dtype=torch.float16, device=cuda_device)
    v = random_tensor((b, hkv, t, d), generator=generator, dtype=torch.float16, device=cuda_device)
    lengths = torch.randint(1, t + 1, (b,), generator=generator).to(cuda_device)
    out = decode_attention(q, k, v, lengths=lengths, backend="triton")
    ref = R.decode_attention(q.double(), k.double(), v.double(), lengths=lengths, scale=d**-0.5)
    assert_close(out, ref, atol=2e-3, rtol=2e-3)
    assert torch.equal(out, decode_attention(q, k, v, lengths=lengths, backend="triton"))
    out32 = decode_attention(q.float(), k.float(), v.float(), lengths=lengths, backend="triton")
    assert_close(out32, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("b,t", [(1, 4096), (1, 32768)], ids=lambda v: str(v))
def test_gpu_kernel_switches_give_the_default_bits(b, t, generator, cuda_device, monkeypatch):
    hq, hkv, d = 32, 8, 128
    q = random_tensor((b, hq, d), generator=generator, dtype=torch.float16, device=cuda_device)
    k = random_tensor((b, hkv, t, d), generator=generator, dtype=torch.float16, device=cuda_device)
    v = random_tensor((b, hkv, t, d), generator=generator, dtype=torch.float16, device=cuda_device)
    lengths = torch.tensor([t - 5], device=cuda_device)
    want = [
        decode_attention(q, k, v, backend="triton"),
        decode_attention(q, k, v, lengths=lengths, backend="triton"),
    ]
    assert K.PDL and K._pdl(q.device)  # the default on an H100/H200
    # Each launch switch away from its default (Q_IN_LOOP's is on for these multi-split rows).
    for name, value in (("PDL", False), ("Q_IN_LOOP", False)):
        monkeypatch.setattr(K, name, value)
        got = [
            decode_attention(q, k, v, backend="triton"),
            decode_attention(q, k, v, lengths=lengths, backend="triton"),
        ]
        for a, w in zip(got, want, strict=True):
            assert torch.equal(a, w)


def test_split_kernel_cached_launch_passes_options_and_every_parameter(record_cached_launch, generator):
    # The GPU-only cached path, Triton stubbed: the first call of an argument class compiles with the
    # launch options (stages), later ones pass every kernel parameter to the compiled launcher, and a
    # call with other constexprs (lengths given) compiles its own.
    compiles, runs = record_cached_launch(K._split_launch)
    q, k, v = _long_row(generator, torch.device("cpu"), torch.float16)
    lengths = torch.tensor([1000])
    for _ in range(2):
        decode_attention(q, k, v, backend="triton")
        decode_attention(q, k, v, lengths=lengths, backend="triton")
    assert len(compiles) == 2 and len(runs) == 2
    assert all(keywords["num_stages"] >= 1 for _, keywords in compiles)
    assert all(len(args) - 9 == len(K._split_launch.params) for args in runs)
