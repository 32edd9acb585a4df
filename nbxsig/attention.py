"""Decode attention over a preallocated KV cache (re-exported by :mod:`nbxsig.models`).

Example:
    >>> import torch
    >>> from nbxsig.attention import KVCache, decode_attention
    >>> cache = KVCache(2, n_layers=1, n_kv_heads=2, head_dim=64, capacity=128)
    >>> q = torch.randn(2, 8, 64)                                 # 4 query heads per KV head
    >>> out = decode_attention(q, cache.keys(0), cache.values(0), lengths=cache.lengths())
"""

from __future__ import annotations

import math

import torch

from ._dispatch import Backend, Op
from ._validate import check_device, check_float, check_int, check_tensor
from .errors import bad_type, bad_value

_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_DECODE = Op(
    "decode_attention",
    torch_impl="nbxsig.reference.attention:decode_attention",
    triton_impl="nbxsig.kernels.decode_attention:decode_attention",
    triton_dtypes=_FLOAT_DTYPES,
)
MAX_HEAD_DIM = 256


def decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    *,
    lengths: torch.Tensor | None = None,
    scale: float | None = None,
    bias: torch.Tensor | None = None,
    backend: Backend | None = None,
) -> torch.Tensor:
    """Attention of one query token per row over a KV cache; deterministic split-KV on the GPU.

    Args:
        q: ``(B, Hq, D)`` float16/bfloat16/float32 (float64 on the torch backend).
        k_cache: ``(B, Hkv, T, D)``, same dtype; read through its strides (a view into a larger
            preallocated cache works without a copy). ``Hq`` must be a multiple of ``Hkv`` (GQA:
            query head ``h`` uses KV head ``h // (Hq / Hkv)``). ``D ≤ 256``, any value.
        v_cache: ``(B, Hkv, T, Dv)``, same dtype, ``Dv ≤ 256``.
        lengths: optional ``(B,)`` integer tensor: keys ``t < lengths[b]`` are valid (default all
            ``T``). Values must lie in ``0..T``; on CPU this is checked, on CUDA (no host sync, so
            the op can be graph-captured) they are clamped to that range.
        scale: factor on ``q·k``; default ``1/sqrt(D)``.
        bias: optional ``(B, T)`` or ``(1, T)`` additive bias on the scores (``-inf`` masks a key).
        backend: None (auto: Triton on CUDA), "triton" or "torch".

    Returns:
        ``(B, Hq, Dv)`` in ``q.dtype``; softmax and accumulation in float32. A row with no valid
        key gives zeros; a NaN in q, a valid key or value, or the bias gives NaN (as ``torch.softmax``).
        Slots at or past ``lengths[b]`` are never read into the result (an uninitialised cache is
        fine). Differentiable in ``q``, the caches and ``bias`` on both backends (Triton's backward
        recomputes the torch path).

    Raises:
        ParameterValueError / ParameterTypeError: shapes, dtypes, devices or lengths out of range.

    Example:
        >>> k = v = torch.randn(1, 2, 100, 64)
        >>> out = decode_attention(torch.randn(1, 8, 64), k, v)   # (1, 8, 64)
    """
    dtypes = (*_FLOAT_DTYPES, torch.float64)
    check_tensor("q", q, dtypes=dtypes, min_dim=3, max_dim=3)
    check_tensor("k_cache", k_cache, dtypes=(q.dtype,), min_dim=4, max_dim=4)
    check_tensor("v_cache", v_cache, dtypes=(q.dtype,), min_dim=4, max_dim=4)
    b, hq, d = q.shape
    _, hkv, t, dk = k_cache.shape
    if k_cache.shape[0] != b or dk != d:
        raise bad_value("k_cache", k_cache, f"a (B={b}, Hkv, T, D={d}) tensor matching q {tuple(q.shape)}")
    if v_cache.shape[:3] != k_cache.shape[:3]:
        raise bad_value("v_cache", v_cache, f"a tensor of shape ({b}, {hkv}, {t}, Dv) like k_cache")
    if hq % hkv:
        raise bad_value("q", q, f"a head count that is a multiple of k_cache's {hkv} KV heads (GQA)")
    if d > MAX_HEAD_DIM:
        raise bad_value("q", q, f"a head dim D of at most {MAX_HEAD_DIM}")
    if v_cache.shape[3] > MAX_HEAD_DIM:
        raise bad_value("v_cache", v_cache, f"a value head dim Dv of at most {MAX_HEAD_DIM}")
    for name, x in (("k_cache", k_cache), ("v_cache", v_cache)):
        if x.device != q.device:
            raise bad_value(name, x, f"on q's device {q.device}")
    if lengths is not None:
        check_tensor("lengths", lengths, dtypes=(torch.int32, torch.int64), min_dim=1, max_dim=1)
        if lengths.shape[0] != b or lengths.device != q.device:
            raise bad_value("lengths", lengths, f"a ({b},) integer tensor on {q.device}")
        if lengths.device.type == "cpu" and (int(lengths.min()) < 0 or int(lengths.max()) > t):
            raise bad_value("lengths", lengths, f"values in 0..T={t}")
    if bias is not None:
        check_tensor("bias", bias, dtypes=dtypes, min_dim=2, max_dim=2)
        if bias.shape[0] not in (1, b) or bias.shape[1] != t or bias.device != q.device:
            raise bad_value("bias", bias, f"a (1, {t}) or ({b}, {t}) tensor on {q.device}")
    scale = 1.0 / math.sqrt(d) if scale is None else check_float("scale", scale)
    check_int("T", t, min_value=1, context="(the caches' length)")
    chosen = _DECODE.backend(backend, device=q.device, dtype=q.dtype, numel=q.numel())
    return _DECODE(q, k_cache, v_cache, lengths=lengths, scale=scale, bias=bias, backend=chosen)


class KVCache:
    """A preallocated key/value cache for streaming decode, all layers in one tensor per K and V.

    Storage ``k``/``v``: ``(n_layers, batch, n_kv_heads, slots, head_dim)``; :meth:`keys` and
    :meth:`values` return per-layer views that :func:`decode_attention` reads by strides.
    Slots form a ring: token ``p`` goes to slot ``p % slots``. Without ``window`` there are
    ``capacity`` slots and attention covers the whole history while it fits; with ``window`` there
    are ``window`` slots, so attention covers exactly the last ``window`` tokens (keys carry
    their rotary position, so their order inside the ring does not matter). The position counter
    lives on the device (``pos``, one per stream) and nothing here synchronises with the host, so a
    step can be captured in a CUDA graph; ``steps`` counts the tokens since the last :meth:`reset`
    on the host (every stream advances together), so that a cache without a window refuses a token
    it has no slot for (:meth:`check_room`) instead of overwriting the oldest one.

    Args:
        batch: streams. n_layers / n_kv_heads / head_dim: model geometry.
        capacity: the most tokens kept without a window; must be >= ``window`` when both are set.
        window: sliding-window length, or None.
        dtype / device: of the storage (a floating dtype).
    """

    def __init__(
        self,
        batch: int,
        n_layers: int,
        n_kv_heads: int,
        head_dim: int,
        capacity: int,
        window: int | None = None,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        self.batch = check_int("batch", batch, min_value=1)
        self.n_layers = check_int("n_layers", n_layers, min_value=1)
        self.n_kv_heads = check_int("n_kv_heads", n_kv_heads, min_value=1)
        self.head_dim = check_int("head_dim", head_dim, min_value=1, max_value=MAX_HEAD_DIM)
        capacity = check_int("capacity", capacity, min_value=1)
        if window is not None:
            window = check_int("window", window, min_value=1)
            if window > capacity:
                raise bad_value("capacity", capacity, f">= window={window}")
        if dtype not in (*_FLOAT_DTYPES, torch.float64):
            raise bad_type("dtype", dtype, "a floating torch.dtype (float16, bfloat16, float32, float64)")
        if device is not None:  # (None stays torch's default device)
            device = check_device(device)
        self.window = window
        self.slots = capacity if window is None else window
        self.steps = 0
        shape = (n_layers, batch, n_kv_heads, self.slots, head_dim)
        # Outside inference mode: a cache made under torch.inference_mode is updated in place by
        # steps and resets outside it, which torch refuses for inference tensors.
        with torch.inference_mode(False):
            self.k = torch.zeros(shape, dtype=dtype, device=device)
            self.v = torch.zeros(shape, dtype=dtype, device=device)
            self.pos = torch.zeros(batch, dtype=torch.int64, device=device)
        self._rows = torch.arange(batch, device=device)

    def _layer(self, layer: int) -> int:
        # A step calls keys/values once per layer: the common case costs one type test and a compare.
        if type(layer) is not int or not 0 <= layer < self.n_layers:
            return check_int("layer", layer, min_value=0, max_value=self.n_layers - 1)
        return layer

    def keys(self, layer: int) -> torch.Tensor:
        """``(batch, n_kv_heads, slots, head_dim)`` view of one layer's keys (``layer`` in
        ``0..n_layers-1``)."""
        return self.k[self._layer(layer)]

    def values(self, layer: int) -> torch.Tensor:
        """``(batch, n_kv_heads, slots, head_dim)`` view of one layer's values (``layer`` in
        ``0..n_layers-1``)."""
        return self.v[self._layer(layer)]

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store the current token's ``k``/``v`` ``(batch, n_kv_heads, head_dim)`` of ``layer`` at slot
        ``pos % slots`` (does not advance ``pos``: every layer writes the same token). Raises like
        :meth:`check_room` when a cache without a window is full (the write would replace its oldest
        token)."""
        layer = self._layer(layer)
        want = (self.batch, self.n_kv_heads, self.head_dim)
        for name, x in (("k", k), ("v", v)):
            check_tensor(name, x, dtypes=(*_FLOAT_DTYPES, torch.float64), min_dim=3, max_dim=3)
            if tuple(x.shape) != want:  # no broadcasting: a (1, H, D) k is not every stream's key
                raise bad_value(name, x, f"a (batch, n_kv_heads, head_dim) = {want} tensor")
        self.check_room()
        slot = torch.remainder(self.pos, self.slots)
        self.k[layer, self._rows, :, slot] = k.to(self.k.device, self.k.dtype)
        self.v[layer, self._rows, :, slot] = v.to(self.v.device, self.v.dtype)

    def lengths(self) -> torch.Tensor:
        """Valid slots once the current token is written: ``min(pos + 1, slots)`` per stream (int32)."""
        return torch.clamp(self.pos + 1, max=self.slots).to(torch.int32)

    def check_room(self) -> None:
        """Raise unless the cache can take another token: without a window it holds ``capacity``
        tokens, and a ring past that would silently drop the oldest keys (a sliding window the model
        was not built with)."""
        if self.window is None and self.steps >= self.slots:
            raise bad_value(
                "state",
                f"a KVCache holding {self.steps} tokens",
                f"a cache with room for another token: without a window it holds capacity={self.slots} "
                "(reset() it, or make the state with a larger capacity)",
            )

    def advance(self) -> None:
        """Move every stream to the next token."""
        self.pos += 1
        self.steps += 1

    def reset(self) -> None:
        """Forget every stream's history (storage is kept)."""
        self.pos.zero_()
        self.steps = 0
