"""A small causal transformer for streaming sequence models, with an int4 path and a KV cache.

:class:`SeqModel` is a pre-norm transformer (RMSNorm, rotary positions, grouped-query attention
with an optional sliding window, SwiGLU MLP). ``forward`` runs whole sequences (training);
``init_state``/``step`` run one token per stream against a :class:`KVCache` with
:func:`decode_attention`, and give the same outputs as ``forward`` (1e-4 in float32).
``quantize`` turns its linears into int4 (:class:`nbxsig.quant.Int4Linear`); ``capture_step``
records a step in a CUDA graph for a fixed batch of streams.

Example:
    >>> import torch
    >>> from nbxsig.models import SeqConfig, SeqModel
    >>> cfg = SeqConfig(d_in=80, d_model=128, n_layers=2, n_heads=4, n_kv_heads=2,
    ...                 d_ff=256, d_out=10, window=64)
    >>> model = SeqModel(cfg).eval()
    >>> y = model(torch.randn(2, 50, 80))                 # (2, 50, 10)
    >>> state = model.init_state(2)
    >>> y0, state = model.step(torch.randn(2, 80), state)  # (2, 10)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ._dispatch import Backend, Op
from ._validate import check_float, check_int, check_tensor
from .attention import KVCache, decode_attention
from .errors import BackendUnavailableError, bad_type, bad_value
from .quant import Int4Linear, check_group_size, quantize_model
from .reference import models as reference_models
from .reference.attention import sliding_window_mask

__all__ = [
    "CapturedStep",
    "KVCache",
    "RMSNorm",
    "SeqConfig",
    "SeqModel",
    "decode_attention",
    "rms_norm",
    "rope",
]


_FLOAT32_MAX = torch.finfo(torch.float32).max


@dataclass(frozen=True)
class SeqConfig:
    """Geometry of a :class:`SeqModel`.

    Args:
        d_in: input features per step. d_model: residual width. n_layers: transformer blocks.
        n_heads: query heads (``d_model / n_heads`` = head dim, even). n_kv_heads: key/value heads
            (divides ``n_heads``). d_ff: SwiGLU hidden width. d_out: outputs per step.
        window: sliding attention window in steps (a token sees itself and the ``window - 1``
            before it), or None for full causal attention.
        rope_base: rotary frequency base (> 1, at most float32's largest finite value).
    """

    d_in: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    d_out: int
    window: int | None
    rope_base: float = 10000.0

    def __post_init__(self) -> None:
        for name in ("d_in", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "d_out"):
            check_int(name, getattr(self, name), min_value=1)
        if self.window is not None:
            check_int("window", self.window, min_value=1)
        # At most float32's largest: the frequency table is float32 and starts from float32(rope_base);
        # a larger base became inf there, and every frequency but the first 0 (no rotation).
        check_float("rope_base", self.rope_base, min_value=1.0, min_inclusive=False, max_value=_FLOAT32_MAX)
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2:
            raise bad_value(
                "d_model", self.d_model, f"a multiple of n_heads={self.n_heads} with an even head dim"
            )
        if self.n_heads % self.n_kv_heads:
            raise bad_value("n_kv_heads", self.n_kv_heads, f"a divisor of n_heads={self.n_heads}")
        if self.d_model // self.n_heads > 256:
            raise bad_value("d_model", self.d_model, "at most 256 per head (d_model / n_heads <= 256)")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_RMS_NORM = Op(
    "rms_norm",
    torch_impl="nbxsig.reference.models:rms_norm",
    triton_impl="nbxsig.kernels.rmsnorm:rms_norm",
    triton_dtypes=_FLOAT_DTYPES,
)
_ROPE = Op(
    "rope",
    torch_impl="nbxsig.reference.models:rope",
    triton_impl="nbxsig.kernels.rope:rope",
    triton_dtypes=_FLOAT_DTYPES,
)
# A decode step's fused launches (internal: SeqModel.step; no autograd): the residual add with the
# next norm, the q/k rotation with the KV-cache write, and the SwiGLU gate.
_ADD_RMS_NORM = Op(
    "add_rms_norm",
    torch_impl="nbxsig.reference.models:add_rms_norm",
    triton_impl="nbxsig.kernels.rmsnorm:add_rms_norm",
    triton_dtypes=_FLOAT_DTYPES,
)
_SILU_MUL = Op(
    "silu_mul",
    torch_impl="nbxsig.reference.models:silu_mul",
    triton_impl="nbxsig.kernels.swiglu:silu_mul",
    triton_dtypes=_FLOAT_DTYPES,
)
_ROPE_CACHE = Op(
    "rope_and_cache",
    torch_impl="nbxsig.reference.models:rope_and_cache",
    triton_impl="nbxsig.kernels.rope:rope_and_cache",
    triton_dtypes=_FLOAT_DTYPES,
)


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, *, eps: float = 1e-6, backend: Backend | None = None
) -> torch.Tensor:
    """Root-mean-square normalisation over the last dim: ``x / sqrt(mean(x²) + eps) · weight``.

    Args:
        x: ``(..., D)`` float16/bfloat16/float32 (float64 on the torch backend).
        weight: ``(D,)`` floating, on ``x``'s device.
        eps: added to the mean square (>= 0).
        backend: None (auto: Triton on CUDA, one launch), "triton" or "torch".

    Returns:
        ``(..., D)`` in ``x.dtype``, computed in float32 (float64 for float64 ``x``); differentiable.

    Example:
        >>> y = rms_norm(torch.randn(2, 5, 64), torch.ones(64))   # (2, 5, 64)
    """
    check_tensor("x", x, dtypes=(*_FLOAT_DTYPES, torch.float64), min_dim=1)
    check_tensor("weight", weight, dtypes=(*_FLOAT_DTYPES, torch.float64), min_dim=1, max_dim=1)
    if weight.shape[0] != x.shape[-1] or weight.device != x.device:
        raise bad_value("weight", weight, f"a ({x.shape[-1]},) tensor on x's device {x.device}")
    eps = check_float("eps", eps, min_value=0.0)
    chosen = _RMS_NORM.backend(backend, device=x.device, dtype=x.dtype, numel=x.numel())
    return _RMS_NORM(x, weight, eps=eps, backend=chosen)


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x²) + eps) · weight``, computed in float32 (:func:`rms_norm`)."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = check_float("eps", eps, min_value=0.0)
        self.weight = nn.Parameter(torch.ones(check_int("dim", dim, min_value=1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, eps=self.eps)


def rope(
    x: torch.Tensor, pos: torch.Tensor, base: float = 10000.0, *, backend: Backend | None = None
) -> torch.Tensor:
    """Rotary embedding (rotate-half form) of ``x (..., H, D)`` at positions ``pos``.

    Args:
        x: ``(..., H, D)`` float16/bfloat16/float32 (float64 on the torch backend), ``D`` even.
        pos: real tensor of positions broadcastable to ``x.shape[:-2]``, on ``x``'s device.
        base: the frequency base (> 0, at most float32's largest finite value): angles
            ``float32(pos) · base^(-2i/D)``, in float32 -- the same bits on both backends, so
            ``SeqModel.forward`` and ``step`` agree.
        backend: None (auto: Triton on CUDA, one launch), "triton" or "torch".

    Returns:
        ``(x1·cos − x2·sin, x2·cos + x1·sin)`` on the halves of the last dim, in ``x.dtype``
        (computed in float32, float64 for float64 ``x``); differentiable in ``x``.

    Example:
        >>> q = rope(torch.randn(2, 5, 4, 16), torch.arange(5))   # (B, T, H, D), a position per T
    """
    check_tensor("x", x, dtypes=(*_FLOAT_DTYPES, torch.float64), min_dim=2)
    if x.shape[-1] % 2:
        raise bad_value("x", x, "an even head dim D (rotate-half pairs i with i + D/2)")
    if not isinstance(pos, torch.Tensor) or pos.is_complex() or pos.dtype == torch.bool:
        raise bad_type("pos", pos, "a real tensor of positions")
    lead = tuple(x.shape[:-2])
    try:
        fits = torch.broadcast_shapes(pos.shape, lead) == lead  # pos may not add or widen dims
    except RuntimeError:
        fits = False
    if not fits:
        raise bad_value("pos", pos, f"positions broadcastable to x's leading dims {lead}")
    if pos.device != x.device:
        raise bad_value("pos", pos, f"on x's device {x.device}")
    base = check_float("base", base, min_value=0.0, min_inclusive=False, max_value=_FLOAT32_MAX)
    return _rope(x, pos, reference_models.rope_frequencies(x.shape[-1], base, x.device), backend)


def _rope(x: torch.Tensor, pos: torch.Tensor, inv_freq: torch.Tensor, backend: Backend | None = None):
    """:func:`rope` with its frequency table given (the model keeps one per device)."""
    chosen = _ROPE.backend(backend, device=x.device, dtype=x.dtype, numel=x.numel())
    return _ROPE(x, pos, inv_freq, backend=chosen)


class _Block(nn.Module):
    def __init__(self, cfg: SeqConfig) -> None:
        super().__init__()
        hd = cfg.head_dim
        self.attn_norm = RMSNorm(cfg.d_model)
        # q, k and v in one linear (output rows q | k | v), the MLP's gate and up in another: a decode
        # step's small matmuls are launch-bound, and int4 adds a dequantization to each, so one
        # linear per group instead of per projection. (Each row's init and int4 groups are the same
        # as separate linears': both depend on in_features only.)
        self.qkv_sizes = (cfg.n_heads * hd, cfg.n_kv_heads * hd, cfg.n_kv_heads * hd)
        self.wqkv = nn.Linear(cfg.d_model, sum(self.qkv_sizes), bias=False)
        self.wo = nn.Linear(cfg.n_heads * hd, cfg.d_model, bias=False)
        self.mlp_norm = RMSNorm(cfg.d_model)
        self.w_gate_up = nn.Linear(cfg.d_model, 2 * cfg.d_ff, bias=False)
        self.w_down = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def qkv(self, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(q, k, v)`` of the normed input ``a (..., d_model)``: views into one linear's output."""
        return self.wqkv(a).split(self.qkv_sizes, dim=-1)

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.w_gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
        return self.w_down(F.silu(gate) * up)


def _same_device(device: object, target: torch.device) -> bool:
    """Whether ``device`` names ``target``, without touching any device: "cuda" is the current CUDA
    device (parameters carry an index), "cpu:0" is "cpu"; an unparsable name is not a match."""
    try:
        d = torch.device(device)
    except (RuntimeError, TypeError):
        return False
    if d.type != target.type:
        return False
    if d.type == "cuda" and d.index is None:
        return torch.cuda.is_available() and torch.cuda.current_device() == target.index
    return d.type == "cpu" or d.index == target.index


class SeqModel(nn.Module):
    """Causal transformer over ``(B, T, d_in)`` sequences with a streaming ``step``.

    Args:
        config: a :class:`SeqConfig`.
    """

    def __init__(self, config: SeqConfig) -> None:
        super().__init__()
        if not isinstance(config, SeqConfig):
            raise bad_type("config", config, "a SeqConfig")
        self.config = config
        self.in_proj = nn.Linear(config.d_in, config.d_model)
        self.blocks = nn.ModuleList(_Block(config) for _ in range(config.n_layers))
        self.final_norm = RMSNorm(config.d_model)
        self.out_proj = nn.Linear(config.d_model, config.d_out)
        # The rotary frequency table per device (float32, kept out of the module's buffers so that
        # ``.to(float16)`` leaves it alone); built on first use, which for a graph is its warm-up.
        self._rope_tables: dict[torch.device, torch.Tensor] = {}

    def _rope_table(self, device: torch.device) -> torch.Tensor:
        table = self._rope_tables.get(device)
        if table is None:
            cfg = self.config
            # Outside inference mode: the table outlives the call that builds it, and an inference
            # tensor cannot be saved for a later training forward's backward (the Triton rope's).
            with torch.inference_mode(False):
                table = self._rope_tables[device] = reference_models.rope_frequencies(
                    cfg.head_dim, cfg.rope_base, device
                )
        return table

    def _param(self) -> torch.Tensor:
        return self.final_norm.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Whole sequences: ``x (B, T, d_in)`` → ``(B, T, d_out)``; attention is causal and limited to
        the window. Uses ``F.scaled_dot_product_attention`` with an explicit mask."""
        cfg = self.config
        self._check_input("x", x, 3)
        if x.shape[-1] != cfg.d_in:
            raise bad_value("x", x, f"a (B, T, d_in={cfg.d_in}) tensor")
        b, t, _ = x.shape
        hd, g = cfg.head_dim, cfg.n_heads // cfg.n_kv_heads
        pos = torch.arange(t, device=x.device)  # broadcasts against (B, T)
        freqs = self._rope_table(x.device)
        mask = sliding_window_mask(t, cfg.window, device=x.device)
        h = self.in_proj(x)
        for blk in self.blocks:
            q, k, v = blk.qkv(blk.attn_norm(h))
            q = _rope(q.unflatten(-1, (cfg.n_heads, hd)), pos, freqs)
            k = _rope(k.unflatten(-1, (cfg.n_kv_heads, hd)), pos, freqs)
            v = v.unflatten(-1, (cfg.n_kv_heads, hd))
            q, k, v = (z.transpose(1, 2) for z in (q, k, v))  # (B, H, T, hd)
            k = k.repeat_interleave(g, dim=1)  # query head h reads KV head h // g
            v = v.repeat_interleave(g, dim=1)
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            h = h + blk.wo(o.transpose(1, 2).reshape(b, t, cfg.n_heads * hd))
            h = h + blk.mlp(h)
        return self.out_proj(self.final_norm(h))

    def init_state(
        self,
        batch: int,
        *,
        capacity: int | None = None,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ) -> KVCache:
        """A fresh :class:`KVCache` for ``batch`` streams (``capacity`` defaults to the window and is
        required without one; dtype/device default to the model's, and must equal them: the step
        reads the cache in the model's dtype on its device)."""
        cfg = self.config
        capacity = capacity if capacity is not None else cfg.window
        if capacity is None:
            raise bad_value("capacity", capacity, "an integer when the model has no window")
        p = self._param()
        if dtype is not None and dtype != p.dtype:
            raise bad_value("dtype", dtype, f"the model's dtype {p.dtype} (or None)")
        if device is not None and not _same_device(device, p.device):
            raise bad_value("device", device, f"the model's device {p.device} (or None)")
        return KVCache(
            batch,
            cfg.n_layers,
            cfg.n_kv_heads,
            cfg.head_dim,
            capacity,
            cfg.window,
            dtype=dtype or p.dtype,
            device=device or p.device,
        )

    @torch.no_grad()
    def step(self, x_t: torch.Tensor, state: KVCache) -> tuple[torch.Tensor, KVCache]:
        """One token per stream: ``x_t (B, d_in)`` → ``(y_t (B, d_out), state)`` (state updated in place).

        Equals ``forward`` on the concatenated steps (to 1e-4 in float32). No host synchronisation,
        so it can be captured in a CUDA graph (:meth:`capture_step`)."""
        cfg = self.config
        self._check_state(state)
        self._check_input("x_t", x_t, 2)
        if x_t.shape != (state.batch, cfg.d_in):
            raise bad_value("x_t", x_t, f"a (batch={state.batch}, d_in={cfg.d_in}) tensor")
        state.check_room()
        b, hd = x_t.shape[0], cfg.head_dim
        pos = state.pos
        lengths = state.lengths()
        freqs = self._rope_table(x_t.device)
        h = self.in_proj(x_t)
        # Every layer's tensors have the same device, dtype and size: one backend choice per op a step.
        rope_backend = _ROPE_CACHE.backend(None, device=h.device, dtype=h.dtype, numel=b * cfg.n_heads * hd)
        norm_backend = _ADD_RMS_NORM.backend(None, device=h.device, dtype=h.dtype, numel=h.numel())
        gate_backend = _SILU_MUL.backend(None, device=h.device, dtype=h.dtype, numel=b * cfg.d_ff)
        # Each residual add goes with the norm after it (the next block's, the final one last).
        norms = [*(m for blk in self.blocks for m in (blk.attn_norm, blk.mlp_norm)), self.final_norm][1:]
        normed = self.blocks[0].attn_norm(h)
        for layer, blk in enumerate(self.blocks):
            q, k, v = blk.qkv(normed)
            q, k, v = (z.unflatten(-1, (-1, hd)) for z in (q, k, v))  # strided views, read as such
            # q and k rotated, k and v stored at the stream's cache slot (KVCache.write's slot).
            q = _ROPE_CACHE(q, k, v, pos, freqs, state.keys(layer), state.values(layer), backend=rope_backend)
            o = decode_attention(q, state.keys(layer), state.values(layer), lengths=lengths)
            norm = norms[2 * layer]
            h, normed = _ADD_RMS_NORM(
                h, blk.wo(o.reshape(b, cfg.n_heads * hd)), norm.weight, eps=norm.eps, backend=norm_backend
            )
            mlp_out = blk.w_down(_SILU_MUL(blk.w_gate_up(normed), backend=gate_backend))
            norm = norms[2 * layer + 1]
            h, normed = _ADD_RMS_NORM(h, mlp_out, norm.weight, eps=norm.eps, backend=norm_backend)
        state.advance()
        return self.out_proj(normed), state

    def _check_input(self, name: str, x: torch.Tensor, rank: int) -> None:
        """``x`` is a ``rank``-dim tensor of the model's dtype on its device."""
        p = self._param()
        check_tensor(name, x, dtypes=(p.dtype,), min_dim=rank, max_dim=rank)
        if x.device != p.device:
            raise bad_value(name, x, f"on the model's device {p.device}")

    def _check_state(self, state: KVCache) -> None:
        """``state`` is a :class:`KVCache` made for this model (:meth:`init_state`'s geometry, dtype
        and device)."""
        if not isinstance(state, KVCache):
            raise bad_type("state", state, "a KVCache (see SeqModel.init_state)")
        cfg, p = self.config, self._param()
        made = (state.n_layers, state.n_kv_heads, state.head_dim, state.window, state.k.dtype, state.k.device)
        want = (cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, cfg.window, p.dtype, p.device)
        if made != want:
            raise bad_value(
                "state",
                f"a KVCache (n_layers, n_kv_heads, head_dim, window, dtype, device) = {made}",
                f"this model's state {want} (see SeqModel.init_state)",
            )

    def quantize(self, group_size: int = 128) -> SeqModel:
        """Replace the linears by int4 :class:`~nbxsig.quant.Int4Linear` layers, in place.

        Linears whose input width is not a multiple of ``group_size`` (typically ``in_proj`` with a
        small ``d_in``) stay in floating point. Returns ``self``."""
        group_size = check_group_size(group_size)
        skip = [
            name
            for name, mod in self.named_modules()
            if isinstance(mod, nn.Linear) and mod.in_features % group_size
        ]
        quantize_model(self, group_size, skip=skip)
        return self

    def quantized_layers(self) -> list[str]:
        """Names of the int4 layers."""
        return [name for name, mod in self.named_modules() if isinstance(mod, Int4Linear)]

    @torch.no_grad()
    def capture_step(self, batch: int, *, capacity: int | None = None) -> CapturedStep:
        """Record :meth:`step` for ``batch`` streams in a CUDA graph.

        Args:
            batch: streams.
            capacity: the state's capacity, as :meth:`init_state` (required without a window).

        Returns:
            A :class:`CapturedStep`: call it with ``x_t (batch, d_in)`` to get ``y_t``; it owns its
            state (``.state``; ``.reset()`` starts every stream over).

        Raises:
            BackendUnavailableError: the model is not on a CUDA device.
        """
        batch = check_int("batch", batch, min_value=1)
        p = self._param()
        if p.device.type != "cuda":
            raise BackendUnavailableError(
                f"capture_step needs the model on a CUDA device, it is on {p.device}"
            )
        state = self.init_state(batch, capacity=capacity)
        static_x = torch.zeros(batch, self.config.d_in, dtype=p.dtype, device=p.device)
        side = torch.cuda.Stream(p.device)
        side.wait_stream(torch.cuda.current_stream(p.device))
        with torch.cuda.stream(side):  # warm-up off the capture: compiles kernels, sets up workspaces
            for _ in range(2):
                self.step(static_x, state)
                state.reset()  # a capacity of 1 still has room for the next one
        torch.cuda.current_stream(p.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_y, _ = self.step(static_x, state)
        state.reset()
        # The graph reads the weights by address: the step keeps these very tensors alive, so
        # dropping the model, or replacing its layers (quantize), cannot free memory it reads.
        weights = (*self.parameters(), *self.buffers(), self._rope_table(p.device))
        return CapturedStep(graph, static_x, static_y, state, weights)


class CapturedStep:
    """A CUDA-graph-captured :meth:`SeqModel.step` for a fixed batch (built by ``capture_step``).

    Calling it copies ``x_t`` into the graph's input, replays the graph and returns the graph's
    output tensor, which the next call overwrites (``.clone()`` it to keep it). It keeps the weight
    tensors the model had when it was captured alive and reads them: in-place changes to them
    (``load_state_dict``, an optimizer step) reach it, layers replaced later (``quantize()``) do not
    (capture again for those)."""

    def __init__(
        self,
        graph: torch.cuda.CUDAGraph,
        x: torch.Tensor,
        y: torch.Tensor,
        state: KVCache,
        weights: tuple[torch.Tensor, ...],
    ) -> None:
        self.graph, self._x, self._y, self.state = graph, x, y, state
        self._weights = weights

    def __call__(self, x_t: torch.Tensor) -> torch.Tensor:
        # The model's dtype, as the eager step takes (copy_ would cast any other silently).
        check_tensor("x_t", x_t, dtypes=(self._x.dtype,))
        if x_t.shape != self._x.shape:
            raise bad_value("x_t", x_t, f"a tensor of shape {tuple(self._x.shape)}")
        self.state.check_room()
        self._x.copy_(x_t)
        self.graph.replay()
        self.state.steps += 1  # the graph advanced every stream's position on the device
        return self._y

    def reset(self) -> None:
        """Start every stream over."""
        self.state.reset()
