"""Streaming inverse STFT: one Triton launch per push advances every stream.

Output sample ``s`` (global index) is the overlap-add of the frames that cover it, divided by the
window envelope. Rather than scatter-adding frames (a race between programs), each program
*gathers*: for ``r = 0..R−1`` (``R = ⌈n_fft/hop⌉``) the frame ``j = s // hop − r`` covers ``s`` at
offset ``t = s − j·hop``, and its contribution is one inverse-DFT row::

    y[s] = Σ_r Σ_k Re X_j[k] · Bc[k, t] + Im X_j[k] · Bs[k, t]       (B = irdft basis · window / scale)
    e[s] = Σ_r w[t]²                                                   (frames j that exist)
    out  = y / e   where e > 1e-11, else 0

Frames ``j`` older than this push come from a history of ``H = R − 1`` frames per stream (the only
state besides a frame count); the program of block 0 also writes the new history to the *other*
of two buffers, so no program reads a history another one is overwriting.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._launch import CachedLaunch
from ._runtime import cdiv, check_launchable, empty_output, next_pow2


# The frame counters change every push: not specialized (Triton would compile a variant per value
# class, and a prepared launch reuses one compiled kernel for all of them).
@triton.jit(do_not_specialize=["frames_before", "last_frame"])
def _istft_push_kernel(
    new_ptr,  # (B, F, n, 2) real view of the new frames
    s_nb,
    s_nf,
    s_nt,
    s_nc,
    hist_ptr,  # (B, F, H, 2) contiguous: the H previous frames
    hist_out_ptr,
    bc_ptr,  # (F_PAD, N_PAD) synthesis basis, window and 1/scale folded in
    bs_ptr,
    w2_ptr,  # (N_PAD,) squared window
    out_ptr,  # (B, n_out)
    n_new,
    n_out,
    frames_before,  # J: frames pushed before this call
    last_frame,  # index of the last frame that exists (J + n_new − 1)
    hop,
    n_fft,
    n_freq,
    H: tl.constexpr,
    R: tl.constexpr,
    F_PAD: tl.constexpr,
    H_PAD: tl.constexpr,
    BLOCK_S: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    s_loc = tl.program_id(1) * BLOCK_S + tl.arange(0, BLOCK_S)
    s_ok = s_loc < n_out
    k = tl.arange(0, F_PAD)
    k_ok = k < n_freq
    acc = tl.zeros((BLOCK_S,), dtype=tl.float32)
    env = tl.zeros((BLOCK_S,), dtype=tl.float32)
    for r in tl.static_range(R):
        j = frames_before + s_loc // hop - r  # global frame index
        t = s_loc % hop + r * hop  # offset inside that frame
        ok = s_ok & (j >= 0) & (j <= last_frame) & (t < n_fft)
        q = j - frames_before  # < 0: from the history, else from this push
        from_hist = q < 0
        m2 = ok[:, None] & k_ok[None, :]
        h_off = (b * n_freq + k[None, :]) * H + (q + H)[:, None]
        hre = tl.load(hist_ptr + 2 * h_off, mask=m2 & from_hist[:, None], other=0.0)
        him = tl.load(hist_ptr + 2 * h_off + 1, mask=m2 & from_hist[:, None], other=0.0)
        n_off = b * s_nb + k[None, :] * s_nf + q[:, None] * s_nt
        nre = tl.load(new_ptr + n_off, mask=m2 & ~from_hist[:, None], other=0.0).to(tl.float32)
        nim = tl.load(new_ptr + n_off + s_nc, mask=m2 & ~from_hist[:, None], other=0.0).to(tl.float32)
        b_off = k[None, :] * n_fft + t[:, None]
        bc = tl.load(bc_ptr + b_off, mask=m2, other=0.0)
        bs = tl.load(bs_ptr + b_off, mask=m2, other=0.0)
        acc += tl.sum((hre + nre) * bc + (him + nim) * bs, axis=1)
        env += tl.where(ok, tl.load(w2_ptr + t, mask=ok, other=0.0), 0.0)
    y = tl.where(env > 1e-11, acc / tl.where(env > 1e-11, env, 1.0), 0.0)
    tl.store(out_ptr + b * n_out + s_loc, y, mask=s_ok)
    if tl.program_id(1) == 0:
        # New history: frames n_new .. n_new + H − 1 of concat(history, new). (Fresh names: compiled
        # Triton refuses a variable whose shape changes inside an if block.)
        hq = tl.arange(0, H_PAD)
        src = hq + n_new
        hm = (hq < H)[:, None] & k_ok[None, :]
        from_h = src < H
        src_h = (b * n_freq + k[None, :]) * H + src[:, None]
        src_n = b * s_nb + k[None, :] * s_nf + (src - H)[:, None] * s_nt
        cre = tl.load(hist_ptr + 2 * src_h, mask=hm & from_h[:, None], other=0.0)
        cim = tl.load(hist_ptr + 2 * src_h + 1, mask=hm & from_h[:, None], other=0.0)
        cre += tl.load(new_ptr + src_n, mask=hm & ~from_h[:, None], other=0.0).to(tl.float32)
        cim += tl.load(new_ptr + src_n + s_nc, mask=hm & ~from_h[:, None], other=0.0).to(tl.float32)
        dst = (b * n_freq + k[None, :]) * H + hq[:, None]
        tl.store(hist_out_ptr + 2 * dst, cre, mask=hm)
        tl.store(hist_out_ptr + 2 * dst + 1, cim, mask=hm)


def istft_push(
    new: torch.Tensor,
    history: torch.Tensor,
    history_out: torch.Tensor,
    basis: torch.Tensor,
    w2: torch.Tensor,
    *,
    frames_before: int,
    n_out: int,
    hop: int,
    n_fft: int,
) -> torch.Tensor:
    """Advance all streams by the frames in ``new`` ``(B, F, n, 2)`` (real view); return ``n_out``
    samples per stream starting at global sample ``frames_before·hop``. Only frames that exist
    (index <= the last one pushed) count, in the sum and in the envelope: the same rule serves the
    pushes (every later frame starts after the samples returned) and the flush (the tail)."""
    check_launchable(new, history, basis)
    if n_out == 0:
        history_out.copy_(history)
        return empty_output((new.shape[0], 0), dtype=torch.float32, device=new.device)
    launch = PushLaunch(new, history, n_out=n_out, hop=hop, n_fft=n_fft)
    return launch(new, history, history_out, basis, w2, frames_before=frames_before)


_push_launch = CachedLaunch(_istft_push_kernel)


class PushLaunch:
    """The push's launch prepared for one signature (the new frames' shape and strides, the history's
    shape, ``n_out > 0``): a push is then an output allocation and one launch through the compiled
    handle. The push is host-bound (a 256-stream 10 ms push runs ~14 µs on an H200), which is what
    this is for; :class:`nbxsig.streaming.StreamingISTFT` keeps a few of these, and
    :func:`istft_push` makes one per call.

    Call it as :func:`istft_push` with the frame count before this push; the caller passes tensors of
    the prepared signature on the prepared device (``history``/``history_out``, ``basis`` and ``w2``
    contiguous float32, ``new`` float32).
    """

    __slots__ = ("constexprs", "device", "empty", "grid", "handles", "head", "shape", "tail")

    def __init__(self, new: torch.Tensor, history: torch.Tensor, *, n_out: int, hop: int, n_fft: int) -> None:
        batch, n_freq, n_new, _ = new.shape
        n_history = history.shape[2]
        # No new frame (the flush) or no history (hop >= n_fft): such tensors may have a null data
        # pointer, which the launcher refuses; every access to them is masked, so the output, never
        # empty here, stands in.
        self.empty = (new.numel() == 0, history.numel() == 0)
        block = min(256, next_pow2(n_out, 16))
        self.grid = (batch, cdiv(n_out, block))
        self.constexprs = dict(H=n_history, R=n_history + 1, F_PAD=next_pow2(n_freq, 16),
                               H_PAD=next_pow2(n_history, 2), BLOCK_S=block)  # fmt: skip
        self.head = tuple(new.stride())
        self.tail = (n_new, n_out, hop, n_fft, n_freq)
        self.shape, self.device = (batch, n_out), new.device
        self.handles: dict = {}  # compiled kernels by device and alignment (see CachedLaunch)

    @staticmethod
    def prepare(new, history, *, n_out: int, hop: int, n_fft: int) -> PushLaunch | None:
        """The prepared launch, or None where there is nothing to return (:func:`istft_push` then
        only rotates the history)."""
        check_launchable(new, history)
        return PushLaunch(new, history, n_out=n_out, hop=hop, n_fft=n_fft) if n_out else None

    def __call__(self, new, history, history_out, basis, w2, *, frames_before: int) -> torch.Tensor:
        out = empty_output(self.shape, dtype=torch.float32, device=self.device)
        if self.empty[0]:
            new = out
        if self.empty[1]:
            history = history_out = out
        n_new, n_out, hop, n_fft, n_freq = self.tail
        scalars = (n_new, n_out, frames_before, frames_before + n_new - 1, hop, n_fft, n_freq)
        tensors = (new, history, history_out, basis[0], basis[1], w2, out)
        pointers = tuple(t.data_ptr() for t in tensors)
        aligned = tuple(ptr & 15 == 0 for ptr in pointers)
        args = (pointers[0], *self.head, *pointers[1:], *scalars)
        if not _push_launch.launch_cached(self.handles, aligned, self.grid, args):
            args = (new, *self.head, *tensors[1:], *scalars)
            _push_launch(self.grid, args, self.constexprs, 4, handles=self.handles, aligned=aligned)
        return out
