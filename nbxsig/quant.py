"""int4 weights (asymmetric, 4.25 bits per weight) and fused dequant-GEMV/GEMM linear layers.

Format (llama.cpp q4_1-like): for a weight ``W (N, K)`` each group of ``group_size`` elements along
``K`` of one output has an fp16 ``scale`` and fp16 ``min``; ``W ≈ q·scale + min`` with ``q`` an
unsigned nibble. Nibbles are packed 8 per int32, low nibble first (nibble ``i`` of word ``r`` is
``k = 8r + i``), ``packed`` is ``(K // 8, N)`` (K-major, so loads coalesce along ``N``) and
``scales``/``mins`` are ``(K // group_size, N)``. Saved and loaded with safetensors.

Example:
    >>> import torch, nbxsig.quant as Q
    >>> w = Q.quantize_int4(torch.randn(256, 512), group_size=128)
    >>> y = Q.int4_linear(torch.randn(3, 512), w)             # (3, 256)
    >>> layer = Q.Int4Linear.from_linear(torch.nn.Linear(512, 256))
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ._dispatch import Backend, Op, check_backend
from ._validate import check_device, check_int, check_tensor
from .errors import ParameterValueError, bad_type, bad_value
from .io import as_path, atomic_open
from .reference import int4 as _ref

__all__ = [
    "Int4Linear",
    "Int4Weight",
    "dequantize_int4",
    "gemv_path",
    "int4_linear",
    "load_quantized",
    "pack_int4",
    "quantize_int4",
    "quantize_model",
    "save_quantized",
    "unpack_int4",
]

_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_INT4_GEMV = Op(
    "int4_linear",
    torch_impl="nbxsig.reference.int4:int4_linear",
    triton_impl="nbxsig.kernels.int4_gemv:int4_linear",
    triton_dtypes=_FLOAT_DTYPES,
)
_INT4_GEMM = Op(
    "int4_linear",
    torch_impl="nbxsig.reference.int4:int4_linear",
    triton_impl="nbxsig.kernels.int4_gemm:int4_gemm",
    triton_dtypes=(torch.float16, torch.bfloat16),
)
_DEQUANT = Op(
    "dequantize_int4",
    torch_impl="nbxsig.reference.int4:dequantize_kn",
    triton_impl="nbxsig.kernels.int4_gemv:dequantize_kn",
    triton_dtypes=(torch.int32,),
)
#: Rows up to which the fused GEMV runs; beyond it dequantize + a tensor-core ``F.linear`` (or, with
#: ``FUSED_GEMM``, the dequant-GEMM kernel for 16-bit x).
MAX_GEMV_ROWS = 8
#: Run ``M > MAX_GEMV_ROWS`` rows of float16/bfloat16 input through the fused dequant-GEMM
#: (``nbxsig.kernels.int4_gemm``) instead of dequantize + ``F.linear``. Off: on the H200 it tied that
#: path in the captured SeqModel step (420.8 vs 420.5 µs) and at 256-row shapes, and won only at
#: 4096×4096² (189.9 vs 203.2 µs; docs/models.md). Read on every call.
FUSED_GEMM = False


@dataclass
class Int4Weight:
    """A quantized weight of logical shape ``(N, K)``.

    Attributes:
        packed: ``(K // 8, N)`` int32, 8 nibbles per word, low nibble first.
        scales: ``(K // group_size, N)`` fp16.
        mins: ``(K // group_size, N)`` fp16.
        group_size: elements of ``K`` sharing one scale/min.
        shape: ``(N, K)``.
    """

    packed: torch.Tensor
    scales: torch.Tensor
    mins: torch.Tensor
    group_size: int
    shape: tuple[int, int]

    def __post_init__(self) -> None:
        # The kernels read these by their shapes alone: a mismatch would read past the tensors.
        # (Int4Linear builds one when its buffers change, not per call: see Int4Linear.weight.)
        shape = self.shape
        if not (
            isinstance(shape, tuple) and len(shape) == 2 and all(type(v) is int and v > 0 for v in shape)
        ):
            raise bad_value("shape", shape, "a tuple (N, K) of two positive ints")
        n, k = shape
        gs = self.group_size
        if type(gs) is not int or gs < 8 or gs % 8 or k % gs:
            raise bad_value("group_size", gs, f"a multiple of 8 that divides K={k}")
        for name, t, dtypes, rows in (
            ("packed", self.packed, (torch.int32,), k // 8),
            ("scales", self.scales, (torch.float16,), k // gs),
            ("mins", self.mins, (torch.float16,), k // gs),
        ):
            if not isinstance(t, torch.Tensor) or t.dtype not in dtypes:
                raise bad_type(name, t, f"a {dtypes[0]} tensor")
            if t.shape != (rows, n):
                raise bad_value(name, t, f"of shape ({rows}, {n}) for shape={shape}, group_size={gs}")
            if t.device != self.packed.device:
                raise bad_value(name, t, f"on packed's device {self.packed.device}")
        # The kernels index both with scales' strides (a dimension of size 1 is never stepped along).
        if any(
            m != s
            for m, s, size in zip(self.mins.stride(), self.scales.stride(), self.mins.shape, strict=True)
            if size > 1
        ):
            raise bad_value(
                "mins",
                self.mins,
                f"laid out as scales (strides {self.mins.stride()} against {self.scales.stride()})",
            )

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        # Not a tensor: torch functions given one fail with a TypeError naming the function. Defining
        # this makes torch.overrides.has_torch_function() true for an Int4Linear's ``weight``, which is
        # what nn.TransformerEncoderLayer / nn.TransformerEncoder check before their fused inference
        # fast path (eval + no_grad): without it they passed the Int4Weight to
        # torch._transformer_encoder_layer_fwd as a dense weight ("must be Tensor, not Int4Weight").
        return NotImplemented

    @property
    def device(self) -> torch.device:
        return self.packed.device

    def to(self, device: torch.device | str) -> Int4Weight:
        # A device only: the parts' dtypes are the format (w.to(torch.float16) was refused as "packed
        # must be a torch.int32 tensor", an unparsable device with torch's own RuntimeError).
        device = check_device(device)
        return Int4Weight(
            self.packed.to(device), self.scales.to(device), self.mins.to(device), self.group_size, self.shape
        )

    def nbytes(self) -> int:
        """Bytes on disk/in memory: packed nibbles plus fp16 scales and mins."""
        return sum(t.numel() * t.element_size() for t in (self.packed, self.scales, self.mins))

    def save(self, path: str | Path) -> None:
        """Write to a safetensors file (tensors plus ``group_size``/``shape`` in the metadata), atomically:
        an interrupted save leaves any earlier file at ``path`` as it was."""
        tensors = {"packed": self.packed, "scales": self.scales, "mins": self.mins}
        meta = {"format": "nbxsig-int4", "group_size": str(self.group_size), "shape": json.dumps(self.shape)}
        _write_safetensors(path, {k: v.contiguous().cpu() for k, v in tensors.items()}, meta)

    @classmethod
    def load(cls, path: str | Path, *, device: torch.device | str = "cpu") -> Int4Weight:
        """Read a file written by :meth:`save` (checked: its tensors must form a valid weight)."""
        # Checked before the file is opened: safetensors refused a bad device ("gpu", "meta") with an
        # error that was reported against ``path``.
        device = check_device(device)
        if device.type == "meta":
            raise bad_value("device", device, "a device that holds values (such as 'cpu' or 'cuda:0')")
        with _open_safetensors(path, device) as f:
            meta = f.metadata() or {}
            if meta.get("format") != "nbxsig-int4" or set(f.keys()) != {"packed", "scales", "mins"}:
                raise bad_value("path", str(path), "a safetensors file written by Int4Weight.save")
            try:
                shape, group_size = tuple(json.loads(meta["shape"])), int(meta["group_size"])
            except (KeyError, ValueError, TypeError) as err:  # TypeError: a shape such as "24" or "null"
                raise bad_value(
                    "path", str(path), f"an Int4Weight file with valid metadata ({err})"
                ) from None
            return cls(
                f.get_tensor("packed"), f.get_tensor("scales"), f.get_tensor("mins"), group_size, shape
            )


@contextlib.contextmanager
def _open_safetensors(path: str | Path, device: torch.device | str) -> Iterator[Any]:
    """``safe_open`` of an existing file, with a clear error (naming ``path``) for a missing file or one
    that is not safetensors, before any reader sees it."""
    from safetensors import SafetensorError, safe_open

    path = as_path(path)
    if not path.is_file():
        raise bad_value("path", str(path), "an existing file")
    try:
        handle = safe_open(str(path), framework="pt", device=str(device))
    except SafetensorError as err:
        raise bad_value("path", str(path), f"a safetensors file (reading it: {err})") from None
    with handle as f:
        yield f


def _write_safetensors(path: str | Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> None:
    """Write ``tensors`` (CPU, contiguous, no two sharing memory) to ``path`` atomically (a temporary
    sibling renamed into place: an interrupted save leaves an earlier file whole)."""
    from safetensors.torch import save

    path = as_path(path)
    if path.is_dir():
        raise bad_value("path", str(path), "a file path, not a folder")
    data = save(tensors, metadata=metadata)
    with atomic_open(path) as f:
        f.write(data)


def check_group_size(group_size: object) -> int:
    """A ``group_size``: an int >= 8 and a multiple of 8 (8 nibbles per int32 word)."""
    group_size = check_int("group_size", group_size, min_value=8)
    if group_size % 8:
        raise bad_value("group_size", group_size, "a multiple of 8 (8 nibbles per int32 word)")
    return group_size


def _check_group(group_size: int, k: int, *, name: str = "weight") -> int:
    group_size = check_group_size(group_size)
    if k % group_size:
        raise ParameterValueError(
            f"{name} has K={k} input features, which is not a multiple of group_size={group_size}; "
            f"pick a group_size dividing {k} (a multiple of 8) or leave this layer unquantized"
        )
    return group_size


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """Pack nibbles: ``q (K, N)`` integers in 0..15 → ``(K // 8, N)`` int32, low nibble first.

    Raises:
        ParameterValueError: ``q`` is not 2-D, ``K`` is not a multiple of 8 or a value is outside 0..15.
    """
    check_tensor(
        "q", q, dtypes=(torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64), min_dim=2, max_dim=2
    )
    if q.shape[0] % 8:
        raise bad_value("q", q, "a (K, N) tensor with K a multiple of 8")
    if int(q.min()) < 0 or int(q.max()) > 15:
        raise bad_value("q", q, "values in 0..15")
    return _ref.pack_int4(q)


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """Unpack ``(K // 8, N)`` int32 → ``(K, N)`` uint8 in 0..15 (inverse of :func:`pack_int4`)."""
    check_tensor("packed", packed, dtypes=(torch.int32,), min_dim=2, max_dim=2)
    return _ref.unpack_int4(packed)


def quantize_int4(weight: torch.Tensor, group_size: int = 128) -> Int4Weight:
    """Quantize a float weight to int4 with an fp16 scale and min per group of ``group_size`` along K.

    Args:
        weight: ``(N, K)`` float tensor (``nn.Linear.weight`` layout), finite, |w| < 65504.
        group_size: elements of K per scale/min; a multiple of 8 dividing K. Default 128.

    Returns:
        :class:`Int4Weight` on ``weight``'s device. Every element is reproduced within ``scale / 2`` of
        its group (``min`` is rounded down and ``scale`` up to fp16, so the grid covers the group).

    Raises:
        ParameterValueError: K is not a multiple of ``group_size``, or ``weight`` is not finite.
        ParameterTypeError: ``weight`` is not a floating tensor.

    Example:
        >>> w = quantize_int4(torch.randn(64, 256), group_size=64)
    """
    check_tensor("weight", weight, dtypes=(*_FLOAT_DTYPES, torch.float64), min_dim=2, max_dim=2)
    n, k = weight.shape
    group_size = _check_group(group_size, k)
    # Rounding to a grid has no gradient: a weight that requires one (a model's parameter) is read as data
    # (torch warned "Converting a tensor with requires_grad=True to a scalar" on the checks below).
    weight = weight.detach()
    if weight.is_meta:  # no values to quantize (the checks below would fail inside torch's .item())
        raise bad_value("weight", weight, "a tensor with values, not on the meta device")
    if not bool(torch.isfinite(weight).all()) or float(weight.abs().max()) >= 65504.0:
        raise bad_value("weight", weight, "finite values below 65504 in magnitude (fp16 scales and mins)")
    packed, scales, mins = _ref.quantize_int4(weight, group_size)
    return Int4Weight(packed, scales, mins, group_size, (n, k))


def dequantize_int4(
    w: Int4Weight, *, dtype: torch.dtype = torch.float32, backend: Backend | None = None
) -> torch.Tensor:
    """The ``(N, K)`` weight ``q·scale + min``, computed in float32 and rounded once to ``dtype``.

    Returns a transposed view of a contiguous ``(K, N)`` tensor (the layout the Triton kernel writes
    with coalesced stores; ``F.linear`` and ``@`` take it without a copy). Both backends give the
    same bits.
    """
    if not isinstance(w, Int4Weight):
        raise bad_type("w", w, "an Int4Weight")
    if dtype not in (*_FLOAT_DTYPES, torch.float64):
        raise bad_type("dtype", dtype, "a floating dtype")
    chosen = _DEQUANT.backend(backend, device=w.device, dtype=w.packed.dtype, numel=w.packed.numel())
    return _DEQUANT(w.packed, w.scales, w.mins, w.group_size, dtype=dtype, backend=chosen).t()


def gemv_path(m: int, dtype: torch.dtype = torch.float16) -> str:
    """Which Triton-side path ``int4_linear`` takes for ``m`` rows of ``dtype``: ``"fused_gemv"``
    (m ≤ 8); with ``FUSED_GEMM`` on, ``"fused_gemm"`` for float16/bfloat16 (the dequant-GEMM kernel,
    which dequantizes tile by tile into tensor-core dots); otherwise ``"dequant_matmul"`` (dequantize
    to ``dtype``, then ``F.linear``, which follows torch's matmul precision settings).

    Raises:
        ParameterValueError / ParameterTypeError: ``m`` is not an int >= 0, ``dtype`` not a dtype
        :func:`int4_linear` takes.
    """
    # Checked here only: int4_linear (already checked) calls _gemv_path once per call, host time per token.
    m = check_int("m", m, min_value=0)
    if dtype not in (*_FLOAT_DTYPES, torch.float64):
        raise bad_type("dtype", dtype, "float16, bfloat16, float32 or float64 (a torch.dtype)")
    return _gemv_path(m, dtype)


def _gemv_path(m: int, dtype: torch.dtype) -> str:
    if m <= MAX_GEMV_ROWS:
        return "fused_gemv"
    return "fused_gemm" if FUSED_GEMM and dtype in (torch.float16, torch.bfloat16) else "dequant_matmul"


def int4_linear(
    x: torch.Tensor, w: Int4Weight, bias: torch.Tensor | None = None, *, backend: Backend | None = None
) -> torch.Tensor:
    """``x @ dequantize(w)ᵀ + bias``, without materialising the weight for up to 8 rows.

    Args:
        x: ``(..., K)`` float16/bfloat16/float32 (float64 on the torch backend); M = 0 rows gives an
            empty result, as ``F.linear`` (on the torch backend: ``backend="triton"`` refuses empty input).
        w: the quantized weight, logical shape ``(N, K)``, on ``x``'s device.
        bias: optional ``(N,)``.
        backend: None (auto: Triton on CUDA), "triton" or "torch".

    Returns:
        ``(..., N)`` in ``x.dtype``. Accumulation is float32. With ``M = prod(x.shape[:-1]) ≤ 8`` the
        Triton backend runs the fused dequant-GEMV (deterministic: fixed split of K, merged in split
        order); larger M dequantizes to ``x.dtype`` and calls ``F.linear`` (or, with ``FUSED_GEMM``
        on and 16-bit ``x``, runs the fused dequant-GEMM). Differentiable with respect to ``x`` and
        ``bias`` on every path (the weight is frozen): the fused paths' backward is
        ``grad @ dequantize(w)``.

    Shape:
        ``x (..., K)``, ``w (N, K)`` → ``(..., N)``.

    Raises:
        ParameterValueError: K mismatch, bias shape, devices differ. ParameterTypeError: bad dtypes.

    Example:
        >>> y = int4_linear(torch.randn(2, 256), quantize_int4(torch.randn(64, 256)))
    """
    if not isinstance(w, Int4Weight):
        raise bad_type("w", w, "an Int4Weight (see quantize_int4)")
    # Empty x (M = 0 rows) is allowed, as F.linear allows it: an empty batch gives an empty output (auto
    # dispatch sends empty inputs to the torch backend; backend="triton" refuses them, as every op does).
    check_tensor("x", x, dtypes=(*_FLOAT_DTYPES, torch.float64), min_dim=1, allow_empty=True)
    n, k = w.shape
    if x.shape[-1] != k:
        raise bad_value("x", x, f"a tensor whose last dimension is K={k} (the weight's input features)")
    if x.device != w.device:
        raise bad_value("x", x, f"on the weight's device {w.device}")
    if bias is not None:
        check_tensor("bias", bias, dtypes=(*_FLOAT_DTYPES, torch.float64), min_dim=1, max_dim=1)
        if bias.shape[0] != n or bias.device != x.device:
            raise bad_value("bias", bias, f"a ({n},) tensor on {x.device}")
    flat = x.dim() == 2  # the common (M, K) call skips two reshapes (host time per token)
    lead = x.shape[:-1]
    x2 = x if flat else x.reshape(-1, k)  # a view whenever the leading dims allow; read by strides
    m = x2.shape[0]
    chosen = _INT4_GEMV.backend(backend, device=x.device, dtype=x.dtype, numel=x.numel())
    path = _gemv_path(m, x.dtype)
    if chosen == "triton" and path == "dequant_matmul":
        weight = dequantize_int4(w, dtype=x.dtype, backend="triton")
        out = torch.nn.functional.linear(x2, weight, None if bias is None else bias.to(x.dtype))
    elif chosen == "triton":
        op = _INT4_GEMV if path == "fused_gemv" else _INT4_GEMM
        if bias is not None:
            bias = bias.contiguous()  # the kernels read it as a dense (N,) row
        if torch.is_grad_enabled() and (x2.requires_grad or (bias is not None and bias.requires_grad)):
            out = _FusedInt4Linear.apply(x2, bias, w, op)
        else:  # a decode step: no autograd node (host time per token)
            out = op(x2, w.packed, w.scales, w.mins, w.group_size, bias, backend="triton")
    else:
        out = _INT4_GEMV(x2, w.packed, w.scales, w.mins, w.group_size, bias, backend="torch")
    return out if flat else out.reshape(*lead, n)


class _FusedInt4Linear(torch.autograd.Function):
    """A fused kernel's forward; backward ``grad_x = grad @ dequantize(w)``, ``grad_bias = Σ grad``
    (as ``F.linear`` on the dequantized weight, which the unfused paths differentiate)."""

    @staticmethod
    def forward(ctx, x, bias, w, op):
        ctx.w = w
        ctx.bias_dtype = None if bias is None else bias.dtype
        return op(x, w.packed, w.scales, w.mins, w.group_size, bias, backend="triton")

    @staticmethod
    def backward(ctx, grad):
        grad_x = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_x = grad @ dequantize_int4(ctx.w, dtype=grad.dtype, backend="triton")
        if ctx.needs_input_grad[1]:
            grad_bias = grad.sum(0).to(ctx.bias_dtype)
        return grad_x, grad_bias, None, None


class Int4Linear(nn.Module):
    """A linear layer with an int4 weight (buffers ``packed``, ``scales``, ``mins``; optional ``bias``).

    Args:
        in_features, out_features: K and N.
        group_size: elements of K per scale/min (multiple of 8 dividing K).
        bias: whether the layer has a bias.
        backend: passed to :func:`int4_linear` (None = auto).
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        group_size: int = 128,
        bias: bool = True,
        device: torch.device | str | None = None,
        backend: Backend | None = None,
    ) -> None:
        super().__init__()
        # Checked here, as the dispatch's other modules do: a bad value otherwise surfaced at the first
        # forward (backend) or as torch's RuntimeError (device).
        check_backend(backend)
        if device is not None:  # None: torch's default device (a `with torch.device(...)` block)
            device = check_device(device)
        self.in_features = check_int("in_features", in_features, min_value=8)
        self.out_features = check_int("out_features", out_features, min_value=1)
        self.group_size = _check_group(group_size, in_features, name="in_features")
        self.backend = backend
        k, n = in_features, out_features
        self.register_buffer("packed", torch.zeros(k // 8, n, dtype=torch.int32, device=device))
        self.register_buffer("scales", torch.zeros(k // group_size, n, dtype=torch.float16, device=device))
        self.register_buffer("mins", torch.zeros(k // group_size, n, dtype=torch.float16, device=device))
        self.bias = nn.Parameter(torch.zeros(n, device=device), requires_grad=False) if bias else None

    @property
    def weight(self) -> Int4Weight:
        """The buffers as an :class:`Int4Weight`, rebuilt (and checked) only when a buffer was replaced
        (``.to()``, ``_apply``): a decode step calls every layer once per token, and building and
        checking one costs a few µs of host time."""
        cached = self.__dict__.get("_weight")
        if cached is None or not (
            cached.packed is self.packed and cached.scales is self.scales and cached.mins is self.mins
        ):
            cached = self.__dict__["_weight"] = Int4Weight(
                self.packed, self.scales, self.mins, self.group_size, (self.out_features, self.in_features)
            )
        return cached

    @classmethod
    def from_linear(cls, linear: nn.Linear, group_size: int = 128) -> Int4Linear:
        """Quantize an ``nn.Linear`` (its bias is kept in its own dtype)."""
        if not isinstance(linear, nn.Linear):
            raise bad_type("linear", linear, "a torch.nn.Linear")
        if isinstance(linear.weight, nn.parameter.UninitializedParameter):
            # An nn.LazyLinear before its first forward (torch raised a ValueError from .detach()).
            raise bad_value(
                "linear", linear, "an initialised linear (run a forward through a LazyLinear first)"
            )
        w = linear.weight.detach()
        layer = cls(
            linear.in_features,
            linear.out_features,
            group_size=group_size,
            bias=linear.bias is not None,
            device=w.device,
        )
        if w.is_meta:
            # A model built on the meta device (no values): the layer is the int4 skeleton, to be
            # materialised with to_empty() and filled by load_quantized / load_state_dict.
            if linear.bias is not None:
                layer.bias = nn.Parameter(torch.empty_like(linear.bias), requires_grad=False)
            return layer
        q = quantize_int4(w, group_size)
        layer.packed.copy_(q.packed)
        layer.scales.copy_(q.scales)
        layer.mins.copy_(q.mins)
        if linear.bias is not None:
            layer.bias = nn.Parameter(linear.bias.detach().clone(), requires_grad=False)
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return int4_linear(x, self.weight, self.bias, backend=self.backend)

    def _apply(self, fn, recurse=True):
        # Module.to(dtype) / .half() / .bfloat16() cast every floating buffer; the fp16 scales and
        # mins are part of the format (rounded to bfloat16 they would change the weight for good).
        # Device moves and the like still apply; a changed dtype is undone from the exact originals.
        kept = {name: self._buffers[name] for name in ("scales", "mins")}
        super()._apply(fn, recurse)
        for name, original in kept.items():
            moved = self._buffers[name]
            if moved.dtype != torch.float16:
                self._buffers[name] = original.to(moved.device)
        return self

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"group_size={self.group_size}, bias={self.bias is not None}"
        )


def quantize_model(model: nn.Module, group_size: int = 128, skip: Iterable[str] = ()) -> nn.Module:
    """Replace every ``nn.Linear`` in ``model`` by an :class:`Int4Linear`, in place.

    Args:
        model: any module.
        group_size: as :func:`quantize_int4`.
        skip: qualified names (``model.named_modules()`` keys) of linears to leave in floating point
            (a linear shared under several names stays if any of them is listed); a single string is
            one name. Exact names, not prefixes or patterns: a name that is not a linear of ``model``
            is an error. The linears of an ``nn.MultiheadAttention`` always stay: it reads their
            weights as tensors.

    A model on the meta device gets int4 layers on the meta device (no values): materialise it with
    ``model.to_empty(device=...)`` and fill it with :func:`load_quantized`.

    Returns:
        ``model`` itself.

    Raises:
        ParameterValueError: a linear not in ``skip`` has in_features not divisible by ``group_size``
        (the message names it); ``model`` is itself an ``nn.Linear`` (use
        :meth:`Int4Linear.from_linear`); ``group_size`` not a multiple of 8; ``skip`` names something
        other than a linear of ``model``.
        ParameterTypeError: ``model`` is not a module; ``skip`` is not an iterable of strings.
    """
    if not isinstance(model, nn.Module):
        raise bad_type("model", model, "a torch.nn.Module")
    if isinstance(model, nn.Linear):
        raise bad_value(
            "model", model, "a module containing linears (for one linear: Int4Linear.from_linear)"
        )
    group_size = check_group_size(group_size)
    # A bare string is one name: set("head") was {"h", "e", "a", "d"}, which skipped nothing (or a
    # linear named "h").
    if isinstance(skip, str):
        skip = (skip,)
    try:
        skip = set(skip)
    except TypeError:
        raise bad_type("skip", skip, "an iterable of qualified module names (str)") from None
    if not all(isinstance(name, str) for name in skip):
        raise bad_type("skip", skip, "an iterable of qualified module names (str)")
    # Every place a linear sits, under its qualified name (a shared linear under each of its names).
    # named_children() would list a shared child once, hence _modules. The linears inside
    # nn.MultiheadAttention stay: it reads out_proj.weight as a tensor.
    places = [
        (f"{parent_name}.{attr}" if parent_name else attr, parent, attr, child)
        for parent_name, parent in model.named_modules(remove_duplicate=False)
        if not isinstance(parent, nn.MultiheadAttention)
        for attr, child in parent._modules.items()
        if isinstance(child, nn.Linear)
    ]
    # A name that is not a linear of the model (a typo, or a container such as "encoder", which is no
    # prefix here) used to be ignored silently, quantizing the layer meant to stay.
    linears = {
        name
        for name, mod in model.named_modules(remove_duplicate=False)
        if isinstance(mod, (nn.Linear, Int4Linear))
    }
    if not skip <= linears:
        raise bad_value(
            "skip",
            sorted(skip - linears),
            "qualified names of the model's linears (model.named_modules() keys)",
        )
    skipped = {id(child) for name, _, _, child in places if name in skip}
    targets = {id(child): (name, child) for name, _, _, child in places if id(child) not in skipped}
    for name, child in targets.values():
        _check_group(group_size, child.in_features, name=f"layer {name!r}")
    quantized = {key: Int4Linear.from_linear(child, group_size) for key, (_, child) in targets.items()}
    for _, parent, attr, child in places:
        if id(child) in quantized:
            setattr(parent, attr, quantized[id(child)])
    return model


def save_quantized(model: nn.Module, path: str | Path) -> None:
    """Write a (quantized) model's ``state_dict`` to a safetensors file, atomically (an interrupted save
    leaves any earlier file at ``path`` as it was).

    A tensor the state holds under several names (a linear shared by two attributes, tied weights) is
    stored once, its other names recorded as aliases in the metadata; :func:`load_quantized` restores
    them."""
    if not isinstance(model, nn.Module):
        raise bad_type("model", model, "a torch.nn.Module")
    state: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    first_name: dict[tuple, str] = {}
    own = model.state_dict()
    if any(t.is_meta for t in own.values()):  # no values to write (torch's .cpu() raised NotImplementedError)
        raise bad_value("model", model, "a model whose tensors hold values, not on the meta device")
    for name, tensor in own.items():
        view = (tensor.device, tensor.data_ptr(), tensor.dtype, tuple(tensor.shape), tensor.stride())
        if view in first_name and tensor.numel():
            aliases[name] = first_name[view]
            continue
        first_name[view] = name
        state[name] = tensor.detach().contiguous().cpu()
    # Tensors that overlap without being the same view (a slice of another): independent copies, as
    # safetensors stores no overlapping tensors.
    storages: set[tuple[int, int]] = set()
    for name, tensor in state.items():
        start = tensor.untyped_storage().data_ptr()
        if tensor.numel() and (start, tensor.untyped_storage().nbytes()) in storages:
            state[name] = tensor.clone()
        elif tensor.numel():
            storages.add((start, tensor.untyped_storage().nbytes()))
    metadata = {"format": "nbxsig-quantized-model"}
    if aliases:
        metadata["aliases"] = json.dumps(aliases)
    _write_safetensors(path, state, metadata)


def load_quantized(model: nn.Module, path: str | Path) -> nn.Module:
    """Load a state written by :func:`save_quantized` into ``model`` (already quantized with the same
    structure, e.g. ``quantize_model(build(), group_size)``); strict about names and shapes."""

    if not isinstance(model, nn.Module):
        raise bad_type("model", model, "a torch.nn.Module")
    own = model.state_dict()
    if not own:
        raise bad_value("model", model, "a module with a state (parameters or buffers) to load into")
    device = next(iter(own.values())).device
    if any(t.is_meta for t in own.values()):
        # safe_open refused device "meta" with a message that blamed the file.
        raise bad_value(
            "model",
            model,
            "a model with allocated tensors (for one on the meta device: model.to_empty(device=...))",
        )
    with _open_safetensors(path, device) as f:
        metadata = f.metadata() or {}
        if metadata.get("format") != "nbxsig-quantized-model":
            raise bad_value("path", str(path), "a safetensors file written by save_quantized")
        try:
            aliases = json.loads(metadata.get("aliases", "{}"))
            stored = set(f.keys())
            if not isinstance(aliases, dict) or not set(aliases.values()) <= stored:
                raise ValueError("aliases must name stored tensors")
        except ValueError as err:
            raise bad_value("path", str(path), f"a save_quantized file with valid metadata ({err})") from None
        # Names and shapes first: a mismatch names what differs (quantized with another group size,
        # another model) before anything is loaded.
        source = {**{k: k for k in stored}, **aliases}  # every name -> the stored tensor it reads
        missing, extra = sorted(own.keys() - source.keys()), sorted(source.keys() - own.keys())
        shapes = [
            k
            for k in own.keys() & source.keys()
            if tuple(f.get_slice(source[k]).get_shape()) != tuple(own[k].shape)
        ]
        if missing or extra or shapes:
            details = "; ".join(
                f"{what}: {', '.join(keys[:4])}{' ...' if len(keys) > 4 else ''}"
                for what, keys in (
                    ("missing", missing),
                    ("unexpected", extra),
                    ("other shape", sorted(shapes)),
                )
                if keys
            )
            raise bad_value("path", str(path), f"a state of this model's names and shapes ({details})")
        tensors = {k: f.get_tensor(k) for k in stored}
    # load_state_dict casts silently: a float tensor stored under an int32 name (packed) would be
    # truncated into garbage nibbles. Floating tensors may change precision (a .half() model's bias),
    # integer ones must match exactly.
    dtypes = sorted(
        k
        for k, t in own.items()
        if t.dtype != tensors[source[k]].dtype
        and not (t.is_floating_point() and tensors[source[k]].is_floating_point())
    )
    if dtypes:
        raise bad_value(
            "path", str(path), f"a state of this model's dtypes (other dtype: {', '.join(dtypes[:4])})"
        )
    model.load_state_dict({k: tensors[source[k]] for k in source}, strict=True)
    return model
