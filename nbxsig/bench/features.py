"""Mel front ends and the streaming iSTFT vs torchaudio / torch.istft (the issue's performance table).

Rows: MelSpectrogram 16 kHz n_fft=400 hop=160 80 mels on 64 × 30 s fp32 at matmul precision
"highest" and "high" through the auto path (on a GPU: nbxsig.stft.spectrogram -- the four-step
kernel of ``nbxsig.kernels.fourstep`` at n_fft 400 -- + one mel matmul; at "high" on an H100/H200 the
Gluon kernel of ``nbxsig.kernels.mel_sm90`` where ``kernels.mel.SM90_AUTO`` is on), the GPU paths
forced ("probe": the fused four-step mel kernel, spectrogram + matmul, and on sm_90 the Gluon
kernel), the dense fused kernel and the torch backend at both precisions for comparison, the Whisper
log10 front end (auto; at "high" without the sm_90 kernel; and with it and the four-step kernel off
everywhere: the FFT spectrogram + matmul), and one push of a 256-stream streaming iSTFT (n_fft 20,
hop 5, 10 ms at 24 kHz = 48 frames) against ``torch.istft`` on the same chunk (which carries no
state).
"""

from __future__ import annotations

import os

import torch

from ._harness import Case, GraphReplay


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


def _with_precision(precision: str, fn):
    def run():
        previous = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision(precision)
        try:
            return fn()
        finally:
            torch.set_float32_matmul_precision(previous)

    return run


def _without_fourstep(fn):
    """``fn`` with the four-step and sm_90 kernels off in every auto path (``kernels.fourstep.*_AUTO``,
    ``kernels.mel.SM90_AUTO``)."""
    from ..kernels import fourstep

    def run():
        saved = fourstep.MEL_AUTO, fourstep.SPECTROGRAM_AUTO
        fourstep.MEL_AUTO = fourstep.SPECTROGRAM_AUTO = False
        try:
            return _without_sm90(fn)()
        finally:
            fourstep.MEL_AUTO, fourstep.SPECTROGRAM_AUTO = saved

    return run


def _without_sm90(fn):
    """``fn`` with the sm_90 Gluon mel kernel off the auto path (``kernels.mel.SM90_AUTO``)."""
    from ..kernels import mel as kmel

    def run():
        saved = kmel.SM90_AUTO
        kmel.SM90_AUTO = False
        try:
            return fn()
        finally:
            kmel.SM90_AUTO = saved

    return run


class _TorchaudioMel(torch.nn.Module):
    """torchaudio.transforms.MelSpectrogram's computation, line for line (torch.stft with cuFFT,
    ``abs().pow(2)``, matmul with the filters), for a machine without torchaudio installed."""

    def __init__(self, fb: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("window", torch.hann_window(400))
        self.register_buffer("fb", fb)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        spec = torch.stft(x, 400, 160, 400, self.window, center=True, pad_mode="reflect", return_complex=True)
        return torch.matmul(spec.abs().pow(2.0).transpose(-1, -2), self.fb).transpose(-1, -2)


def cases(*, quick: bool = False) -> list[Case]:
    from .. import features as nf
    from .. import transforms as T
    from ..kernels import mel as kmel

    # NBXSIG_BENCH_DEVICE=cpu (with TRITON_INTERPRET=1) smoke-tests the cases without a GPU.
    device = torch.device(os.environ.get("NBXSIG_BENCH_DEVICE", "cuda"))
    batch, seconds = ((1, 1) if device.type == "cpu" else (8, 10)) if quick else (64, 30)
    gen = torch.Generator(device="cpu").manual_seed(0)
    x = (0.1 * torch.randn(batch, 16000 * seconds, generator=gen)).to(device)
    kw = dict(sample_rate=16000, n_fft=400, hop_length=160, n_mels=80)
    ours = T.MelSpectrogram(**kw, backend="triton").to(device)
    try:
        import torchaudio

        theirs = torchaudio.transforms.MelSpectrogram(**kw).to(device)
        base_name = f"torchaudio {torchaudio.__version__}"
    except Exception:  # the GPU machine may lack torchaudio (or its libraries): its recipe in torch
        theirs = _TorchaudioMel(ours.mel_scale.fb.clone()).to(device)
        base_name = "torchaudio's recipe in torch (torchaudio not installed)"
    n_frames = 1 + x.shape[1] // 160
    mel_bytes = x.numel() * 4 + batch * 80 * n_frames * 4
    name = f"MelSpectrogram 16k n_fft=400 hop=160 80 mels, {batch}×{seconds} s fp32"

    # The float64 oracle (torch.stft, complex FFT) on the first 8 signals keeps the check's memory small.
    sub = x[:8].double()  # (fewer on a small batch)
    window64 = torch.hann_window(400, dtype=torch.float64, device=device)
    spec64 = torch.stft(sub, 400, 160, window=window64, return_complex=True).abs() ** 2
    fb64 = nf.mel_filterbank(201, 0.0, 8000.0, 80, 16000, dtype=torch.float64, device=device)
    mel64 = (spec64.transpose(-1, -2) @ fb64).transpose(-1, -2)
    log64 = torch.clamp(mel64[..., :-1], min=1e-10).log10()
    fbw = nf.mel_filterbank(
        201, 0.0, 8000.0, 80, 16000, "slaney", "slaney", dtype=torch.float64, device=device
    )
    wlog = torch.clamp((spec64[..., :-1].transpose(-1, -2) @ fbw).transpose(-1, -2), min=1e-10).log10()
    whisper64 = (torch.maximum(wlog, wlog.amax(dim=(-2, -1), keepdim=True) - 8.0) + 4.0) / 4.0
    del spec64, log64

    out = []
    for precision, target in (("highest", "≥ 3× (torchaudio 1408 µs on H200)"), ("high", "≥ 8×")):
        out.append(
            Case(
                name=f"{name}, {precision}",
                run=_with_precision(precision, lambda: ours(x)),
                baseline=_with_precision(precision, lambda: theirs(x)),
                bytes_moved=mel_bytes,
                target=target,
                check=_with_precision(precision, lambda: _rel(ours(x[:8]), mel64)),
                notes=f"baseline: {base_name}",
            )
        )
    # The fused kernel itself (auto dispatch runs nbxsig.stft + a matmul on the GPU, measured faster)
    # and nbxsig's torch backend (the pure-torch twin), for the dispatch rule's record.
    window = ours.spectrogram._window_state()[0]
    fb = ours.mel_scale.fb
    common = dict(n_fft=400, hop_length=160, window=window, filters=fb, power=2.0, scale=1.0)
    common.update(center=True, pad_mode="reflect")

    def fused(inp):
        return kmel.mel_spectrogram(inp, **common, _path="fused")

    twin = T.MelSpectrogram(**kw, backend="torch").to(device)
    comparisons = (("fused kernel (not the auto path)", fused), ("backend='torch' (the twin)", twin))
    for precision in ("highest", "high"):
        for label, impl in comparisons:
            out.append(
                Case(
                    name=f"{name}, {precision}, {label}",
                    run=_with_precision(precision, lambda impl=impl: impl(x)),
                    baseline=_with_precision(precision, lambda: theirs(x)),
                    bytes_moved=mel_bytes,
                    target="comparison",
                    check=_with_precision(precision, lambda impl=impl: _rel(impl(x[:8]), mel64)),
                )
            )
    # The GPU paths forced, for the dispatch rule's record: the four-step kernel, nbxsig.stft's
    # spectrogram + one mel matmul (the auto path without the sm_90 kernel) and, on an H100/H200, the
    # sm_90 kernel (TF32 only, so at "high" alone).
    forced = [(p, path) for p in ("highest", "high") for path in ("fourstep", "unfused")]
    if device.type == "cuda" and torch.cuda.get_device_capability(device) == (9, 0):
        forced.append(("high", "sm90"))
    for precision, path in forced:
        out.append(
            Case(
                name=f"{name}, {precision}, _path={path}",
                run=_with_precision(
                    precision, lambda path=path: kmel.mel_spectrogram(x, **common, _path=path)
                ),
                baseline=_with_precision(precision, lambda: theirs(x)),
                bytes_moved=mel_bytes,
                target="probe",
                check=_with_precision(
                    precision,
                    lambda path=path: _rel(kmel.mel_spectrogram(x[:8], **common, _path=path), mel64),
                ),
            )
        )
    for precision in ("highest", "high"):
        out.append(
            Case(
                name=f"Whisper log-mel (80 mels, per-example max−8), {batch}×{seconds} s, {precision}",
                run=_with_precision(precision, lambda: nf.whisper_log_mel(x)),
                baseline=_with_precision(
                    precision, lambda: torch.clamp(theirs(x)[..., :-1], min=1e-10).log10()
                ),
                bytes_moved=mel_bytes,
                target="≥ 3× / ≥ 8× (torchaudio + log10(clamp) 1469 µs on H200)",
                check=_with_precision(precision, lambda: _rel(nf.whisper_log_mel(x[:8]), whisper64)),
            )
        )

    # Whisper at "high" without the sm_90 kernel (the four-step spectrogram + the projection).
    out.append(
        Case(
            name=f"Whisper log-mel (80 mels, max−8), {batch}×{seconds} s, high, without the sm_90 kernel",
            run=_without_sm90(_with_precision("high", lambda: nf.whisper_log_mel(x))),
            baseline=_with_precision("high", lambda: torch.clamp(theirs(x)[..., :-1], min=1e-10).log10()),
            bytes_moved=mel_bytes,
            target="probe",
            check=_without_sm90(_with_precision("high", lambda: _rel(nf.whisper_log_mel(x[:8]), whisper64))),
        )
    )
    # Whisper with the four-step and sm_90 kernels switched off (the older auto path: FFT + matmul).
    for precision in ("highest", "high"):
        unfused = _without_fourstep(_with_precision(precision, lambda: nf.whisper_log_mel(x)))
        out.append(
            Case(
                name=f"Whisper log-mel (80 mels, max−8), {batch}×{seconds} s, {precision}, unfused",
                run=unfused,
                baseline=_with_precision(
                    precision, lambda: torch.clamp(theirs(x)[..., :-1], min=1e-10).log10()
                ),
                bytes_moved=mel_bytes,
                target="probe",
                check=_without_fourstep(
                    _with_precision(precision, lambda: _rel(nf.whisper_log_mel(x[:8]), whisper64))
                ),
            )
        )
    try:
        out += _streaming_cases(device, gen)
    except Exception as err:  # a failure here must not cost the mel rows above
        print(f"streaming rows skipped: {err!r}")
    return out


def _streaming_cases(device: torch.device, gen: torch.Generator) -> list[Case]:
    from ..streaming import StreamingISTFT

    out = []
    # Streaming iSTFT: 256 streams, 10 ms at 24 kHz = 240 samples = 48 frames of hop 5 per push.
    streams, frames = 256, 48
    hann = torch.hann_window(20, device=device)
    signal = torch.randn(streams, 24000, generator=gen).to(device)
    spec = torch.stft(signal, 20, 5, window=hann, return_complex=True)
    chunk = spec[..., 100 : 100 + frames].contiguous()
    stream = StreamingISTFT(20, 5, window=hann, backend="triton")
    stream.push(spec[..., :100])

    def push_check() -> float:
        s = StreamingISTFT(20, 5, window=hann, backend="triton")
        pieces = [s.push(spec[..., i : i + frames]) for i in range(0, spec.shape[-1], frames)]
        got = torch.cat([*pieces, s.flush()], dim=-1)
        return _rel(got, torch.istft(spec, 20, 5, window=hann))

    push = dict(
        run=lambda: stream.push(chunk),
        baseline=lambda: torch.istft(chunk, 20, 5, window=hann),
        bytes_moved=chunk.numel() * 8 + streams * frames * 5 * 4,
    )
    out.append(
        Case(
            name="streaming iSTFT push n_fft=20 hop=5, 256 streams × 48 frames (10 ms @ 24 kHz)",
            target="≤ 40 µs per push (torch.istft per chunk 128 µs on H200, no state)",
            check=push_check,
            **push,
        )
    )
    # The same push timed on the host's clock until its output is ready: the latency a caller sees.
    out.append(
        Case(
            name="streaming iSTFT push, wall latency (push + synchronize, median of 200)",
            target="≤ 40 µs per push",
            latency=True,
            **push,
        )
    )
    # The same push replayed from a CUDA graph: the kernel's own time, without Python's launch cost.
    try:
        graphed = StreamingISTFT(20, 5, window=hann, backend="triton")
        graphed.push(spec[..., :100])
        replay = GraphReplay(lambda: graphed.push(chunk), warmup=1)
        out.append(
            Case(
                name="streaming iSTFT push, CUDA-graph replay (same shapes)",
                run=replay,
                baseline=lambda: torch.istft(chunk, 20, 5, window=hann),
                bytes_moved=chunk.numel() * 8 + streams * frames * 5 * 4,
                target="≤ 40 µs",
            )
        )
    except Exception as err:  # a capture failure must not cost the other rows
        print(f"CUDA-graph row skipped: {err!r}")
    return out
