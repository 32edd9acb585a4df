"""Suite-wide set-up.

CPU runs (``make test``) execute every Triton kernel under Triton's interpreter; that needs
``TRITON_INTERPRET=1`` before triton is first imported, which is why it is set here, at the top
of the first module pytest loads. ``make gpu-test`` sets ``NBXSIG_TEST_DEVICE=cuda`` and runs the
``gpu``-marked tests on a real device, where a missing GPU is a failure, not a skip.
"""

from __future__ import annotations

import os

TEST_DEVICE = os.environ.get("NBXSIG_TEST_DEVICE", "cpu")
if TEST_DEVICE == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"
os.environ["NBXSIG_POISON_OUTPUTS"] = "1"  # unwritten kernel outputs read as NaN
os.environ.pop("NBXSIG_BACKEND", None)  # the suite picks backends explicitly

import pytest  # noqa: E402
import torch  # noqa: E402

from nbxsig.testing import seed_from  # noqa: E402


def _interpreter_fma_rounds_once() -> None:
    """Make the interpreter's ``tl.fma`` round once for float32, as the GPU's FFMA does.

    Triton 3.6's interpreter computes ``fma(x, y, z)`` as numpy ``x * y + z`` -- two roundings --
    so a kernel that accumulates with ``tl.fma`` (the int4 GEMV) would differ from its bit-exact
    oracle on CPU only. Other dtypes keep the interpreter's own arithmetic.
    """
    import numpy as np
    from triton.runtime import interpreter

    from nbxsig.reference.int4 import fma_float32

    plain = interpreter.InterpreterBuilder.create_fma

    def create_fma(self, x, y, z):
        if not x.data.dtype == y.data.dtype == z.data.dtype == np.float32:
            return plain(self, x, y, z)
        fused = fma_float32(*(torch.from_numpy(np.array(h.data)) for h in (x, y, z))).numpy()
        return interpreter.TensorHandle(fused, z.dtype.scalar)

    interpreter.InterpreterBuilder.create_fma = create_fma


def _interpreter_scalar_loop_bounds() -> None:
    """Let the interpreter run loops whose bounds are runtime scalars (``range(lo, hi)`` with ``lo``
    loaded or passed in), as the mel projection's band loops are.

    Triton 3.6's interpreter holds a scalar as a one-element 1-D array and converts it with
    ``int(array)``, which numpy 2.4 refuses (triton-lang/triton#9171, fixed upstream after 3.6). The
    conversion here is the same one, of that array's only element.
    """
    from triton.runtime import interpreter

    patch_tensor = interpreter._patch_lang_tensor

    def patched(tensor, scope):
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(())))

    interpreter._patch_lang_tensor = patched


def _interpreter_grid_limits() -> None:
    """Make the interpreter refuse a grid that CUDA would refuse: more than 2^31 - 1 programs along axis 0,
    or more than ``nbxsig.kernels._runtime.MAX_GRID_YZ`` (CUDA's 65535, lowered by ``grid_limit``)
    along axis 1 or 2. The interpreter itself runs any grid, so a launcher that overflows an axis passed
    on the CPU and failed on the GPU with "invalid argument"."""
    from triton.runtime import interpreter

    from nbxsig.kernels import _runtime

    set_grid_dim = interpreter.InterpreterBuilder.set_grid_dim

    def checked(self, nx, ny, nz):
        if nx > 2**31 - 1 or max(ny, nz) > _runtime.MAX_GRID_YZ:
            raise AssertionError(f"grid ({nx}, {ny}, {nz}) exceeds CUDA's limits (axes 1 and 2: "
                                 f"{_runtime.MAX_GRID_YZ})")  # fmt: skip
        set_grid_dim(self, nx, ny, nz)

    interpreter.InterpreterBuilder.set_grid_dim = checked


if TEST_DEVICE == "cpu":
    _interpreter_fma_rounds_once()
    _interpreter_scalar_loop_bounds()
    _interpreter_grid_limits()


@pytest.fixture
def generator(request: pytest.FixtureRequest) -> torch.Generator:
    """A CPU generator seeded from the test's id: fresh inputs per test, identical on re-runs."""
    return torch.Generator().manual_seed(seed_from(request.node.nodeid))


@pytest.fixture
def device() -> torch.device:
    """The device kernels are tested on: CPU (interpreter) in ``make test``, CUDA in ``make gpu-test``."""
    if TEST_DEVICE == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        pytest.fail(f"NBXSIG_TEST_DEVICE={TEST_DEVICE} but torch sees no CUDA device")
    return torch.device(TEST_DEVICE)


@pytest.fixture
def cuda_device() -> torch.device:
    """For ``gpu``-marked tests: the CUDA device, or a failure (never a skip) when there is none."""
    if not torch.cuda.is_available():
        pytest.fail("this test needs a CUDA device; run it with `make gpu-test` on the GPU machine")
    return torch.device("cuda")


@pytest.fixture
def grid_limit(monkeypatch: pytest.MonkeyPatch) -> int:
    """CUDA's limit on grid axes 1 and 2 lowered to 3 programs (the launchers read it at call time, and on
    the CPU the interpreter enforces it): a batch of a few signals then exercises what a batch of more
    than 65535 does on the GPU."""
    from nbxsig.kernels import _runtime

    assert _runtime.MAX_GRID_YZ == 65535  # (CUDA's, for every compute capability)
    monkeypatch.setattr(_runtime, "MAX_GRID_YZ", 3)
    return 3


@pytest.fixture
def record_cached_launch(monkeypatch: pytest.MonkeyPatch):
    """Run a ``CachedLaunch`` down its GPU-only cached path on CPU tensors with Triton stubbed out.

    ``record_cached_launch(launcher)`` returns ``(compiles, runs)``: the ``(args, keywords)`` of each
    launch that went through (stubbed) Triton -- the first of each argument class -- and the
    arguments each later launch passed to the compiled launcher's ``run``.
    """
    from nbxsig.bench.host_overhead import _NoLaunch
    from nbxsig.kernels import _launch as L

    def record(launcher):
        compiles, runs = [], []

        class Recording:
            def __getitem__(self, grid):
                return lambda *args, **keywords: (compiles.append((args, keywords)), _NoLaunch())[1]

        # CPU tensors are launchable only where the interpreter is on (check_launchable, the
        # dispatch): so it is for this stubbed launch in a `make gpu-test` run too.
        monkeypatch.setenv("TRITON_INTERPRET", "1")
        monkeypatch.setattr(launcher, "kernel", Recording())
        monkeypatch.setattr(launcher, "handles", {})
        monkeypatch.setattr(launcher, "interpreted", False)
        monkeypatch.setattr(L, "CACHED_LAUNCH", True)
        monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 0)
        monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 0)
        monkeypatch.setattr(_NoLaunch, "run", lambda self, *args: runs.append(args))
        return compiles, runs

    return record
