"""Launching a jitted Triton kernel through its compiled handle (:class:`CachedLaunch`).

Small calls -- a batch-1 istft, a streaming push, one token's GEMV or decode attention -- run a few µs
on the GPU, and Triton's own launch path (``JITFunction.run``: argument binding, specialization key,
option parsing) costs more than that on the host. The kernel modules launch through a
:class:`CachedLaunch` of each kernel instead; the first launch of each argument class still goes
through Triton, which compiles or finds the kernel.
"""

from __future__ import annotations

import inspect

import torch
import triton
import triton.language as tl
from triton import knobs

#: Launch through the cached compiled handles (:class:`CachedLaunch`): a repeated call skips
#: ``JITFunction.run``'s argument binding and key hashing. On: measured on an H200 at ec7b8ee
#: (batch-1 istft n_fft=20 hop=5 1×240000, do_bench, three interleaved passes in one process) 8.5 /
#: 8.4 / 8.7 µs per eager call against 43.5 / 67.7 / 23.9 µs through Triton's launch -- the cached
#: call is as fast as the kernel itself (CUDA-graph replay 8.1 µs). (An earlier pair of runs never
#: took this path: Triton 3.6's launch hooks are ``HookChain`` objects, never None; ``_direct``
#: checks for installed hooks.) ``test_cuda_istft_per_argument_class`` covers both settings.
CACHED_LAUNCH = True


def divisible_by_16(arg: torch.Tensor | int) -> bool:
    """Whether Triton specializes ``arg`` as 16-divisible: a tensor's address 16-byte aligned, an int a
    multiple of 16 (the ``tt.divisibility`` that vectorizes loads and stores)."""
    return (arg.data_ptr() if isinstance(arg, torch.Tensor) else arg) % 16 == 0


_PDL_DEVICES: dict[torch.device, bool] = {}
#: Launch options per programmatic-dependent-launch setting (the interpreter's launcher takes no
#: ``launch_pdl``, so "off" passes nothing).
PDL_LAUNCH = {False: {}, True: {"launch_pdl": True}}


def pdl_supported(device: torch.device) -> bool:
    """Whether launches on ``device`` can use programmatic dependent launch (``launch_pdl``): an
    NVIDIA GPU of compute capability 9.0 or newer (griddepcontrol is sm_90 PTX); never the
    interpreter or a CPU tensor. Memoised: the launchers ask on every call."""
    if device.type != "cuda":
        return False
    ok = _PDL_DEVICES.get(device)
    if ok is None:
        ok = _PDL_DEVICES[device] = (
            torch.version.hip is None and torch.cuda.get_device_capability(device)[0] >= 9
        )
    return ok


@triton.jit
def prefetch_l2(ptrs):
    """Ask L2 for the lines at ``ptrs`` (PTX ``prefetch.global.L2``): no register, no wait, no fault.

    Nothing reaches the program, so it is safe even against a writer still running: L2 is the GPU's
    point of coherence and a line fetched early is never stale. The depthwise stencils use it for
    rows ahead, the int4 GEMV for its weights before the PDL wait, the sm_90 mel kernel's loader for
    its next tile's samples. sm_90 PTX: callers compile it in only where the interpreter never runs it.
    One address per 128-byte line is enough.
    """
    tl.inline_asm_elementwise(
        "prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;", "=r,l", [ptrs], dtype=tl.int32, is_pure=False, pack=1
    )


def arg_class(arg) -> object:
    # What Triton specializes a launch argument on (native_specialize_impl): a tensor's dtype and
    # 16-byte alignment; an int's value 1 (a constant), divisibility by 16 and width (i32/i64/u64);
    # nothing for a float. Equal classes compile to the same kernel. Host time on every launch (a
    # kernel of ~25 arguments: a few µs), hence the plain int first and no helper calls.
    kind = type(arg)
    if kind is not int:
        if isinstance(arg, torch.Tensor):
            return (arg.dtype, not arg.data_ptr() & 15)
        if not isinstance(arg, int):  # bools and int subclasses are classed as ints below
            return kind
    return (arg == 1, not arg & 15, -(1 << 31) <= arg < (1 << 31), arg < (1 << 63))


class CachedLaunch:
    """Launch a jitted kernel through its compiled handle, skipping ``JITFunction.run``'s per-call
    argument binding, cache-key hashing and option parsing -- host time that dominates small calls
    (the batch-1 istft: GPU time 8 µs, eager call 24-68 µs through Triton, 8.5 µs through this).
    Switched by ``CACHED_LAUNCH``.

    The first launch of an argument class (``arg_class``: the same facts Triton specializes on,
    plus the constexprs and warps) goes through Triton, which compiles or finds the kernel; later
    ones call its launcher directly on the current stream. Under the interpreter, or with a launch
    hook installed (profilers), every launch goes through Triton.

    ``handles``: a handle cache owned by a caller whose non-tensor arguments, constexprs, warps and
    tensor dtypes never change (a prepared launch, :class:`IstftLaunch`); its keys are then only
    the device and ``aligned``, the 16-byte alignment of each tensor argument.
    """

    def __init__(self, kernel) -> None:
        self.kernel = kernel
        self.handles: dict = {}
        # The kernel's parameters in signature order (the launcher takes all of them).
        self.params = tuple(inspect.signature(kernel.fn).parameters.values())
        # Triton decides interpreted vs compiled when the kernel is defined (at import).
        self.interpreted = not isinstance(kernel, triton.runtime.JITFunction)

    def _direct(self) -> bool:
        # Launch hooks (profilers): Triton 3.6 keeps them in HookChains (never None, empty when
        # unused); older releases and user code may set plain callables.
        enter, leave = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
        return (
            CACHED_LAUNCH
            and not self.interpreted
            and not (enter is not None and getattr(enter, "calls", True))
            and not (leave is not None and getattr(leave, "calls", True))
        )

    def __call__(
        self,
        grid: tuple[int, ...],
        args: tuple,
        constexprs: dict,
        num_warps: int,
        *,
        handles: dict | None = None,
        aligned: tuple[bool, ...] = (),
        options: dict | None = None,
    ) -> None:
        options = options or {}  # other compile options (num_stages, enable_fp_fusion, ...)
        if not self._direct():
            self.kernel[grid](*args, **constexprs, num_warps=num_warps, **options)
            return
        # Set up by the first launch, which went through Triton (torch.cuda.current_device would
        # check CUDA's initialisation on every call).
        device = torch._C._cuda_getDevice()
        if handles is None:
            handles = self.handles
            key = (device, num_warps, *constexprs.items(), *options.items(), *map(arg_class, args))
        else:
            key = (device, aligned)
        entry = handles.get(key)
        if entry is None:
            handle = self.kernel[grid](*args, **constexprs, num_warps=num_warps, **options)
            handle = handle.result() if hasattr(handle, "result") else handle  # async compile
            tail = self._tail(len(args), constexprs)
            handles[key] = DescriptorLaunch.of(handle, tail) or (handle, tail)
            return
        run_handle(entry, device, grid, args)

    def _tail(self, n_args: int, constexprs: dict) -> tuple:
        # Triton's launcher takes every parameter after the runtime ones too, in signature order:
        # the constexprs passed, and the defaults of those left out (it ignores their values, but
        # not their count). Fixed per handle key, whose constexprs it holds.
        return tuple(constexprs.get(p.name, p.default) for p in self.params[n_args:])

    def launch_cached(self, handles: dict, aligned: tuple[bool, ...], grid, pointers: tuple) -> bool:
        """Launch a prepared caller's kernel through the handle it cached (see ``handles`` above) and
        return True; False where there is none yet or the direct path is off (then launch with
        tensors through ``__call__``). ``pointers``: the arguments with each tensor replaced by its
        ``data_ptr()`` -- Triton's launcher takes an int as the address itself, which spares the
        caller a ``view_as_real`` (Triton has no complex pointers) and the launcher its
        ``cuPointerGetAttribute`` per tensor (the plan checked the devices)."""
        if not self._direct():
            return False
        device = torch._C._cuda_getDevice()
        entry = handles.get((device, aligned))
        if entry is None:
            return False
        run_handle(entry, device, grid, pointers)
        return True


def run_handle(entry: tuple, device: int, grid, args: tuple) -> None:
    # Triton's compiled launcher on the current stream: grid, stream, function, metadata, no launch
    # metadata or hooks (``_direct`` checked), then every kernel parameter (see ``_tail``).
    if isinstance(entry, DescriptorLaunch):
        entry(device, grid, args)
        return
    handle, tail = entry
    stream = torch._C._cuda_getCurrentRawStream(device)
    handle.run(grid[0], grid[1], grid[2] if len(grid) > 2 else 1, stream, handle.function,
               handle.packed_metadata, None, None, None, *args, *tail)  # fmt: skip


class DescriptorLaunch:
    """A compiled kernel with host-side TMA descriptor arguments (``TensorDescriptor``), launched without
    Triton's per-call wrapper, which encodes every descriptor anew on every launch (``fill_tma_descriptor``:
    a driver call and a few Python objects each). The encoded form of each descriptor object is kept on the
    object itself, so it lives exactly as long as the descriptor and the tensor it holds; callers pass the
    same descriptor objects while their operands are unchanged (``kernels.mel_sm90``'s cache).

    Built from Triton 3.6's launcher: :meth:`of` returns None where the handle is not laid out that way (the
    caller then launches through Triton's wrapper), or where the kernel needs scratch memory.
    """

    def __init__(self, handle, tail: tuple, launch, positions: list) -> None:
        from triton.backends.nvidia.driver import make_tensordesc_arg

        self.encode = make_tensordesc_arg
        self.handle = handle
        self.tail = tail
        self.launch = launch
        self.positions = positions  # (argument index, the compiler's metadata for that descriptor), in order
        run = handle.run
        self.flags = (run.launch_cooperative_grid, run.launch_pdl)

    @classmethod
    def of(cls, handle, tail: tuple) -> DescriptorLaunch | None:
        run = handle.run
        wrapper = getattr(run, "launch", None)
        code = getattr(wrapper, "__code__", None)
        if code is None or not {"launcher", "tensordesc_indices", "tensordesc_meta"} <= set(code.co_freevars):
            return None
        if run.global_scratch_size or run.profile_scratch_size:
            return None
        cells = dict(zip(code.co_freevars, (cell.cell_contents for cell in wrapper.__closure__), strict=True))
        indices = sorted(cells["tensordesc_indices"])
        metas = cells["tensordesc_meta"] or [None] * len(indices)
        if not indices or any(meta is None for meta in metas):
            return None
        return cls(handle, tail, cells["launcher"], list(zip(indices, metas, strict=True)))

    def __call__(self, device: int, grid, args: tuple) -> None:
        flat = []
        start = 0
        for i, meta in self.positions:
            flat += args[start:i]
            start = i + 1
            # Per compiled metadata (swizzle, block): the metadata dicts live as long as the handles, forever.
            encoded = args[i].__dict__.setdefault("_nbxsig_encoded", {})
            if id(meta) not in encoded:
                encoded[id(meta)] = self.encode(args[i], meta)
            flat += encoded[id(meta)]
        flat += args[start:]
        handle = self.handle
        stream = torch._C._cuda_getCurrentRawStream(device)
        grid_z = grid[2] if len(grid) > 2 else 1
        self.launch(grid[0], grid[1], grid_z, stream, handle.function, *self.flags, None, None,
                    handle.packed_metadata, None, None, None, *flat, *self.tail)  # fmt: skip
