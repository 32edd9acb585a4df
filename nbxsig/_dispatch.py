"""The one dispatch point between user-facing ops and their implementations.

Every public op is an :class:`Op`: a name, a pure-torch implementation (the CPU path for users,
float64-capable, and the tests' oracle) and, where one exists, a Triton implementation. A call
resolves its backend once, with :func:`choose_backend` -- a pure function of the facts below --
and then runs ``op.implementation(backend)``. Implementations are named as ``"module:function"``
strings and imported on first use, so ``import nbxsig`` never imports Triton.

Backend choice (``backend=None``, i.e. auto):

* the environment variable ``NBXSIG_BACKEND`` ("triton" or "torch"), when set, is the default;
* otherwise Triton for a tensor on a GPU Triton supports (``device.type == "cuda"``, which also
  covers ROCm builds of torch) whose dtype the op's kernels take and which is not empty;
* torch for everything else (CPU, MPS, float64, empty tensors).

``backend="triton"`` on a CPU tensor runs under Triton's interpreter when ``TRITON_INTERPRET=1``
was set before Triton was imported (that is how the test-suite runs every kernel without a GPU);
otherwise it raises :class:`~nbxsig.errors.BackendUnavailableError`.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal

import torch

from .errors import BackendUnavailableError, bad_value

Backend = Literal["triton", "torch"]
BACKENDS: tuple[str, ...] = ("triton", "torch")
ENV_VAR = "NBXSIG_BACKEND"


@cache
def triton_installed() -> bool:
    """Whether the ``triton`` package can be imported (checked without importing it)."""
    return importlib.util.find_spec("triton") is not None


def check_backend(backend: object) -> None:
    """A ``backend=`` argument: None (auto), "triton" or "torch" (checked where it is stored, e.g. by a
    module's constructor, as well as by :func:`choose_backend` at the call)."""
    if backend is not None and backend not in BACKENDS:
        raise bad_value("backend", backend, "None, 'triton' or 'torch'")


def interpreter_enabled() -> bool:
    """Whether Triton's interpreter is on (``TRITON_INTERPRET=1``): kernels then run on CPU tensors."""
    value = os.environ.get("TRITON_INTERPRET")
    return value is not None and value.lower() in ("1", "true", "yes", "on")


def choose_backend(
    *,
    requested: str | None,
    env_default: str | None,
    device_type: str,
    dtype: torch.dtype,
    numel: int,
    triton_dtypes: Iterable[torch.dtype],
    has_triton_impl: bool,
    triton_installed: bool,
    interpreter: bool,
    torch_measured_faster: bool = False,
) -> Backend:
    """Decide between ``"triton"`` and ``"torch"`` for one call. Pure: no I/O, no device queries.

    Args:
        requested: the caller's ``backend`` argument (None = auto).
        env_default: the value of ``NBXSIG_BACKEND`` (None or "" when unset).
        device_type: ``tensor.device.type`` of the call's main input ("cuda", "cpu", "mps", ...).
        dtype: the dtype the kernels would see.
        numel: elements of the main input.
        triton_dtypes: dtypes the op's Triton kernels accept.
        has_triton_impl: whether the op has a Triton implementation at all.
        triton_installed / interpreter: what the platform offers.
        torch_measured_faster: the op's own size rule says its torch path was measured faster for this
            call; only the automatic choice (no ``backend``, no ``NBXSIG_BACKEND``) follows it.

    Returns:
        "triton" or "torch".

    Raises:
        ParameterValueError: ``requested``/``env_default`` is not a backend name.
        BackendUnavailableError: Triton was requested explicitly but cannot run this call.
    """
    check_backend(requested)
    # An unset or empty variable means auto.
    if env_default not in (None, "") and env_default not in BACKENDS:
        raise bad_value(ENV_VAR, env_default, "unset, empty, 'triton' or 'torch'")
    explicit = requested is not None
    choice = requested or env_default or None
    if choice == "torch":
        return "torch"
    triton_dtypes = tuple(triton_dtypes)
    reasons = []
    if not has_triton_impl:
        reasons.append("this op has no Triton kernel")
    if not triton_installed:
        reasons.append("the triton package is not installed")
    if dtype not in triton_dtypes:
        allowed = ", ".join(str(d).replace("torch.", "") for d in triton_dtypes)
        reasons.append(f"its kernels take {allowed}, not {str(dtype).replace('torch.', '')}")
    if device_type != "cuda" and not (device_type == "cpu" and interpreter):
        reasons.append(
            f"tensors on {device_type!r} need a CUDA/ROCm GPU, or TRITON_INTERPRET=1 for CPU tensors"
        )
    if numel == 0:
        reasons.append("the input is empty")
    if not reasons and choice == "triton":
        return "triton"
    if not reasons and device_type == "cuda" and not torch_measured_faster:
        return "triton"
    if choice == "triton" and explicit:
        raise BackendUnavailableError(f"backend='triton' cannot run this call: {'; '.join(reasons)}")
    # Auto (or the environment's default) falls back quietly: the torch path computes the same function.
    return "torch"


@dataclass(frozen=True)
class Op:
    """A public operation with its implementations.

    Args:
        name: the op's name, used in messages.
        torch_impl: ``"module:function"`` of the pure-torch implementation.
        triton_impl: ``"module:function"`` of the Triton launcher, or None.
        triton_dtypes: input dtypes the Triton launcher accepts.
    """

    name: str
    torch_impl: str
    triton_impl: str | None = None
    triton_dtypes: tuple[torch.dtype, ...] = (torch.float16, torch.bfloat16, torch.float32)
    _impls: dict = field(default_factory=dict, compare=False, repr=False)

    def backend(
        self,
        backend: str | None,
        *,
        device: torch.device | str,
        dtype: torch.dtype,
        numel: int,
        torch_measured_faster: bool = False,
    ) -> Backend:
        """Resolve ``backend`` (None = auto) for a call on ``device`` with ``dtype``, ``numel`` elements
        (``torch_measured_faster``: see :func:`choose_backend`)."""
        return choose_backend(
            requested=backend,
            env_default=os.environ.get(ENV_VAR) or None,
            device_type=torch.device(device).type,
            dtype=dtype,
            numel=numel,
            triton_dtypes=self.triton_dtypes,
            has_triton_impl=self.triton_impl is not None,
            triton_installed=triton_installed(),
            interpreter=interpreter_enabled(),
            torch_measured_faster=torch_measured_faster,
        )

    def implementation(self, backend: Backend) -> Callable[..., Any]:
        """The function that implements this op on ``backend`` (imported on first use)."""
        impl = self._impls.get(backend)
        if impl is None:
            target = self.torch_impl if backend == "torch" else self.triton_impl
            if target is None:  # choose_backend never returns "triton" for such an op
                raise BackendUnavailableError(f"{self.name} has no {backend} implementation")
            module, function = target.split(":")
            impl = getattr(importlib.import_module(module), function)
            self._impls[backend] = impl
        return impl

    def __call__(self, *args: Any, backend: Backend, **kwargs: Any) -> Any:
        if backend == "triton":
            # Kernels read memory through data_ptr(), which holds a tensor with PyTorch's lazy
            # negation bit (``x.conj().imag``) un-negated: resolve it first (a no-op without one).
            args = tuple(_resolved(a) for a in args)
            kwargs = {k: _resolved(v) for k, v in kwargs.items()}
        return self.implementation(backend)(*args, **kwargs)


def _resolved(value: Any) -> Any:
    return value.resolve_neg() if isinstance(value, torch.Tensor) else value
