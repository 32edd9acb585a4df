"""The spectral suite: nbxsig.stft against torch.stft/torch.istft (issue #3's performance table).

All cases: float32 (unless marked), periodic Hann, center=True, reflect padding, onesided,
torch's default ``get_float32_matmul_precision("highest")``. ``rel. error`` is against torch in
float64 on the same input. Rows marked "probe" force the dense or the fft path at one n_fft to
locate the crossover that sets ``nbxsig.kernels.stft.DENSE_MAX_N``, or force the power spectrogram's
or the complex stft's four-step kernel (``nbxsig.kernels.fourstep``) on or off.
"""

from __future__ import annotations

import torch

from .. import stft as S
from ._harness import Case


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    out = torch.view_as_real(out) if out.is_complex() else out
    ref = torch.view_as_real(ref) if ref.is_complex() else ref
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


def _stft_case(n_fft, hop, batch, length, *, target="", dtype=torch.float32, spectrogram=False, note=""):
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(batch, length, device=dev, generator=g).to(dtype)
    w = torch.hann_window(n_fft, device=dev)
    n_bins, n_frames = n_fft // 2 + 1, 1 + length // hop
    out_bytes = batch * n_bins * n_frames * (4 if spectrogram else 8)
    nbytes = x.numel() * x.element_size() + out_bytes
    kind = "spectrogram power=2" if spectrogram else "stft"
    name = f"{kind} n_fft={n_fft} hop={hop}, {batch}×{length}" + (
        "" if dtype == torch.float32 else f" {dtype}"
    )
    if spectrogram:

        def run():
            return S.spectrogram(x, n_fft, hop, window=w)

        def base():
            return torch.stft(x, n_fft, hop, window=w, return_complex=True).abs().pow(2)

        def check():
            return _rel(
                run(), torch.stft(x.double(), n_fft, hop, window=w.double(), return_complex=True).abs() ** 2
            )
    else:

        def run():
            return S.stft(x, n_fft, hop, window=w)

        base = (
            None
            if dtype != torch.float32
            else (lambda: torch.stft(x, n_fft, hop, window=w, return_complex=True))
        )

        def check():
            return _rel(run(), torch.stft(x.double(), n_fft, hop, window=w.double(), return_complex=True))

    return Case(name=name, run=run, baseline=base, bytes_moved=nbytes, target=target, check=check, notes=note)


def _istft_case(n_fft, hop, batch, length, *, target="", backward=False):
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(1)
    x = torch.randn(batch, length, device=dev, generator=g)
    w = torch.hann_window(n_fft, device=dev)
    spec = torch.stft(x, n_fft, hop, window=w, return_complex=True)
    nbytes = spec.numel() * 8 + x.numel() * 4
    name = f"istft n_fft={n_fft} hop={hop}, {batch}×{length}"
    if backward:
        name = "istft forward+backward" + name[5:]
        nbytes *= 2
        spec_g = spec.clone().requires_grad_()
        gy = torch.randn(batch, length, device=dev, generator=g)

        def run():
            spec_g.grad = None
            S.istft(spec_g, n_fft, hop, window=w, length=length).backward(gy)
            return spec_g.grad

        def base():
            spec_g.grad = None
            torch.istft(spec_g, n_fft, hop, window=w, length=length).backward(gy)
            return spec_g.grad

        def check():
            ours = run().clone()
            ref = spec.detach().to(torch.complex128).requires_grad_()
            torch.istft(ref, n_fft, hop, window=w.double(), length=length).backward(gy.double())
            return _rel(ours, ref.grad)

        return Case(name=name, run=run, baseline=base, bytes_moved=nbytes, target=target, check=check)

    def run():
        return S.istft(spec, n_fft, hop, window=w, length=length)

    def base():
        return torch.istft(spec, n_fft, hop, window=w, length=length)

    def check():
        return _rel(
            run(), torch.istft(spec.to(torch.complex128), n_fft, hop, window=w.double(), length=length)
        )

    return Case(name=name, run=run, baseline=base, bytes_moved=nbytes, target=target, check=check)


def _probe(case: Case, dense: bool) -> Case:
    from ..kernels import stft as K

    inner = case.run

    def run():
        old = K.DENSE_MAX_N
        K.DENSE_MAX_N = 10**9 if dense else 0
        try:
            return inner()
        finally:
            K.DENSE_MAX_N = old

    def check(inner_check=case.check):
        old = K.DENSE_MAX_N
        K.DENSE_MAX_N = 10**9 if dense else 0
        try:
            return inner_check()
        finally:
            K.DENSE_MAX_N = old

    case.run = run
    case.check = check
    case.notes = f"probe: {'dense' if dense else 'fft'} path"
    case.target = ""
    return case


def _fourstep_probe(
    case: Case, on: bool, precision: str = "highest", switch: str = "SPECTROGRAM_AUTO"
) -> Case:
    """``case`` with the four-step kernel forced on or off, at ``precision``: the power
    spectrogram's (``switch`` "SPECTROGRAM_AUTO") or the complex stft's ("STFT_AUTO")."""
    from ..kernels import fourstep

    def forced(fn):
        def run():
            saved, previous = getattr(fourstep, switch), torch.get_float32_matmul_precision()
            setattr(fourstep, switch, on)
            torch.set_float32_matmul_precision(precision)
            try:
                return fn()
            finally:
                setattr(fourstep, switch, saved)
                torch.set_float32_matmul_precision(previous)

        return run

    case.run, case.check = forced(case.run), forced(case.check)
    case.name += f", {precision}"
    off = "frames + torch.fft" + (" + power kernel" if switch == "SPECTROGRAM_AUTO" else "")
    case.notes = f"probe: {'four-step kernel' if on else off}"
    case.target = ""
    return case


def cases(*, quick: bool = False) -> list[Case]:
    if quick:
        return [
            _stft_case(20, 5, 16, 48000, target="≥ 3×"),
            _istft_case(20, 5, 16, 48000, target="≥ 6×"),
            _stft_case(400, 160, 16, 32000, target="≥ 1.2×"),
        ]
    out = [
        _stft_case(20, 5, 64, 240000, target="≥ 3×"),
        _istft_case(20, 5, 64, 240000, target="≥ 6×"),
        _istft_case(20, 5, 1, 240000, target="≥ 6×"),
        _istft_case(20, 5, 64, 240000, target="≥ 5×", backward=True),
        _stft_case(400, 160, 64, 160000, target="≥ 2×", spectrogram=True),
        _stft_case(400, 160, 64, 160000, target="≥ 1.2×"),
        _stft_case(512, 128, 64, 160000, target="≥ 1×"),
        _stft_case(1000, 250, 16, 480000, target="≥ 1×"),
        _istft_case(1000, 250, 16, 480000, target="≥ 1.5×"),
        _stft_case(2048, 512, 16, 1323000, target="≥ 1×"),
        _istft_case(2048, 512, 16, 1323000, target="≥ 1×"),
        _stft_case(20, 5, 64, 240000, target="report", dtype=torch.bfloat16),
        _stft_case(400, 160, 64, 160000, target="report", dtype=torch.bfloat16),
    ]
    # The power spectrogram's two large-n_fft paths (the four-step kernel is the auto path for
    # composite n_fft): both forced, at both matmul precisions.
    for n_fft, hop in ((400, 160), (512, 128), (256, 64)):
        for precision in ("highest", "high"):
            for on in (True, False):
                case = _stft_case(n_fft, hop, 64, 160000, spectrogram=True)
                out.append(_fourstep_probe(case, on, precision))
    # The complex stft's two large-n_fft paths (the four-step kernel writing the interleaved spectrum
    # vs frames + torch.fft), both forced, at "highest".
    for n_fft, hop, batch, length in ((400, 160, 64, 160000), (512, 128, 64, 160000), (1000, 250, 16, 480000),
                                      (2048, 512, 16, 1323000)):  # fmt: skip
        for on in (True, False):
            out.append(_fourstep_probe(_stft_case(n_fft, hop, batch, length), on, "highest", "STFT_AUTO"))
    for n_fft in (32, 50, 64, 128):
        for dense in (True, False):
            out.append(_probe(_stft_case(n_fft, n_fft // 4, 64, 160000), dense))
    return out
