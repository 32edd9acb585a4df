"""SeqModel: streaming step == whole-sequence forward, int4 quantization, CUDA-graph capture."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from nbxsig.errors import BackendUnavailableError, ParameterTypeError, ParameterValueError
from nbxsig.kernels import rmsnorm as KN
from nbxsig.kernels import rope as KR
from nbxsig.kernels import swiglu as KS
from nbxsig.models import CapturedStep, RMSNorm, SeqConfig, SeqModel, rope
from nbxsig.quant import Int4Linear, load_quantized, save_quantized
from nbxsig.testing import assert_close, random_tensor


def _model(window, *, d_in=12, seed=0, device="cpu", **kw):
    torch.manual_seed(seed)
    cfg = dict(d_in=d_in, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=96, d_out=7, window=window)
    cfg.update(kw)
    return SeqModel(SeqConfig(**cfg)).to(device).eval()


def _stream(model, x, **state_kw):
    state = model.init_state(x.shape[0], **state_kw)
    return torch.stack([model.step(x[:, i], state)[0] for i in range(x.shape[1])], dim=1)


@pytest.mark.parametrize(
    "window,heads", [(5, (4, 2)), (None, (4, 4)), (3, (4, 1))], ids=["W5-GQA2", "full-MHA", "W3-MQA"]
)
def test_step_equals_forward(window, heads, generator):
    model = _model(window, n_heads=heads[0], n_kv_heads=heads[1])
    x = random_tensor((3, 13, 12), generator=generator)
    with torch.no_grad():
        full = model(x)
    streamed = _stream(model, x, capacity=16)
    assert_close(streamed, full, atol=1e-4, rtol=1e-4)


def test_step_through_triton_kernels_equals_forward(generator, device, monkeypatch):
    # Every decode_attention and int4 GEMV of the stream runs on the Triton backend (interpreter on CPU),
    # and so do the step's fused launches: per layer two residual add + norm, one SwiGLU gate, one
    # rope + cache write.
    model = _model(4, device=device).quantize(group_size=32)
    x = random_tensor((2, 6, 12), generator=generator, device=device)
    with torch.no_grad():
        full = model(x)
    monkeypatch.setenv("NBXSIG_BACKEND", "triton")
    launches = []
    for module, name in ((KN, "_launch"), (KS, "_launch"), (KR, "_cache_launch")):
        _count_calls(monkeypatch, module, name, launches)
    streamed = _stream(model, x)
    assert_close(streamed, full, atol=1e-4, rtol=1e-4)
    steps, layers = x.shape[1], model.config.n_layers
    # The first norm of a step is a plain RMSNorm (nothing to add yet).
    assert launches.count((KN, "_launch")) == steps * (2 * layers + 1)
    assert launches.count((KS, "_launch")) == steps * layers
    assert launches.count((KR, "_cache_launch")) == steps * layers


def _count_calls(monkeypatch, module, name, calls):
    """Record ``(module, name)`` in ``calls`` on each call of ``module.name``, which still runs."""
    real = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append((module, name))
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)


def test_training_gradients_match_between_backends(generator, monkeypatch):
    # forward's RMSNorm and rotary layers on the Triton backend (interpreter on CPU), differentiated
    # through their recomputed torch twins: every parameter's gradient as on the torch backend.
    model = _model(5)
    x = random_tensor((2, 9, 12), generator=generator)
    grads = {}
    for backend in ("torch", "triton"):
        monkeypatch.setenv("NBXSIG_BACKEND", backend)
        model.zero_grad()
        model(x).square().sum().backward()
        grads[backend] = {name: p.grad.clone() for name, p in model.named_parameters()}
    assert grads["torch"].keys() == grads["triton"].keys()
    for name, g in grads["triton"].items():
        assert_close(g, grads["torch"][name], atol=1e-5, rtol=1e-4, msg=name)


def test_half_step_through_the_fused_dequant_gemm(generator, device, monkeypatch):
    # 10 float16 streams: every int4 linear of the step has M = 10 > 8 rows, so with FUSED_GEMM on
    # they run the dequant-GEMM kernel; the stream equals the dequantize + F.linear stream in float16.
    import nbxsig.quant as Q
    from nbxsig.kernels import int4_gemm as KM

    model = _model(4, device=device).quantize(group_size=32).half()
    x = random_tensor((10, 3, 12), generator=generator, dtype=torch.float16, device=device)
    monkeypatch.setenv("NBXSIG_BACKEND", "triton")
    unfused = _stream(model, x)
    launches = []
    launch = KM._launch
    monkeypatch.setattr(KM, "_launch", lambda *a, **k: (launches.append(a[0]), launch(*a, **k))[1])
    monkeypatch.setattr(Q, "FUSED_GEMM", True)
    fused = _stream(model, x)
    assert len(launches) == 3 * len(model.quantized_layers())  # every int4 linear of every step
    assert_close(fused, unfused, dtype=torch.float16)


def test_sliding_window_limits_the_context(generator):
    # Changing the input at t = 0 must not change outputs at t >= window·n_layers (receptive field).
    model = _model(3)
    x = random_tensor((1, 10, 12), generator=generator)
    y = model(x)
    x2 = x.clone()
    x2[:, 0] += 5.0
    y2 = model(x2)
    assert not torch.allclose(y[:, :3], y2[:, :3])
    assert torch.equal(y[:, 2 * 2 + 1 :], y2[:, 2 * 2 + 1 :])


def test_quantized_model_error_is_reported_and_stream_matches(generator):
    model = _model(6, d_in=20, d_model=128, d_ff=256)
    x = random_tensor((2, 9, 20), generator=generator)
    with torch.no_grad():
        ref = model(x)
        model.quantize(group_size=32)
        out = model(x)
    names = model.quantized_layers()
    assert "in_proj" not in names and len(names) == 2 * 4 + 1  # d_in=20 is not a multiple of 32
    assert all(isinstance(model.get_submodule(n), Int4Linear) for n in names)
    rel = ((out - ref).norm() / ref.norm()).item()
    print(f"int4 (g32) vs float32 model: relative output difference {rel:.3e}")
    assert 1e-4 < rel < 0.1
    assert_close(_stream(model, x), out, atol=1e-4, rtol=1e-4)


def test_quantized_state_round_trips_through_safetensors(tmp_path, generator):
    model = _model(4, d_model=64).quantize(group_size=32)
    save_quantized(model, tmp_path / "model.safetensors")
    other = _model(4, d_model=64, seed=7).quantize(group_size=32)
    load_quantized(other, tmp_path / "model.safetensors")
    x = random_tensor((1, 5, 12), generator=generator)
    assert torch.equal(model(x), other(x))


def test_rope_is_a_rotation(generator):
    x = random_tensor((2, 5, 3, 16), generator=generator)
    y = rope(x, torch.arange(5), 10000.0)
    assert_close(y.norm(dim=-1), x.norm(dim=-1), dtype="float32")
    assert torch.equal(rope(x[:, :1], torch.zeros(1), 10000.0), x[:, :1])


def test_float64_rope_is_a_float64_rotation(generator):
    # The angles are float32 (the table both backends share), but a float64 x rotates by their
    # float64 cos and sin: rounded to float32, norms drifted by 1e-8 and rope(rope(x, p), -p) missed
    # x by 2e-7.
    x = random_tensor((2, 50, 3, 64), generator=generator, dtype=torch.float64)
    pos = torch.arange(50)
    y = rope(x, pos)
    assert_close(y.norm(dim=-1), x.norm(dim=-1), dtype=torch.float64)
    assert_close(rope(y, -pos), x, dtype=torch.float64)


def test_errors():
    with pytest.raises(ParameterValueError, match="n_kv_heads"):
        SeqConfig(d_in=4, d_model=64, n_layers=1, n_heads=4, n_kv_heads=3, d_ff=8, d_out=2, window=4)
    with pytest.raises(ParameterValueError, match="even head dim"):
        SeqConfig(d_in=4, d_model=60, n_layers=1, n_heads=4, n_kv_heads=2, d_ff=8, d_out=2, window=4)
    model = _model(None)
    with pytest.raises(ParameterValueError, match="capacity"):
        model.init_state(2)
    state = model.init_state(2, capacity=8)
    with pytest.raises(ParameterValueError, match="x_t"):
        model.step(torch.randn(3, 12), state)
    with pytest.raises(ParameterValueError, match="d_in=12"):
        model(torch.randn(1, 4, 5))
    with pytest.raises(BackendUnavailableError, match="CUDA"):
        model.capture_step(2, capacity=8)
    with pytest.raises(ParameterTypeError, match="x must be a tensor of dtype float32"):
        model(torch.randn(1, 4, 12, dtype=torch.float64))
    with pytest.raises(ParameterTypeError, match="x_t must be a tensor of dtype float32"):
        model.step(torch.randn(2, 12).half(), state)
    with pytest.raises(ParameterTypeError, match="state must be a KVCache"):
        model.step(torch.randn(2, 12), None)
    with pytest.raises(ParameterValueError, match="state must be this model's state"):
        model.step(torch.randn(2, 12), _model(None, n_layers=1).init_state(2, capacity=8))
    with pytest.raises(ParameterValueError, match="dtype must be the model's dtype"):
        model.init_state(2, capacity=8, dtype=torch.float16)
    for other in ("cuda", "meta", "nonsense"):  # refused by name, touching no device
        with pytest.raises(ParameterValueError, match="device must be the model's device cpu"):
            model.init_state(2, capacity=8, device=other)
    assert model.init_state(2, capacity=8, device="cpu:0").k.device == torch.device("cpu")
    with pytest.raises(ParameterValueError, match="group_size must be a multiple of 8"):
        _model(None).quantize(12)
    with pytest.raises(ParameterTypeError, match="config must be a SeqConfig"):
        SeqModel({})


def test_inputs_and_layers_refused_by_name():
    model = _model(4)
    state = model.init_state(2)
    # An input on another device than the model (a CPU x for a CUDA model; meta here) reached the
    # first linear and raised torch's device error.
    with pytest.raises(ParameterValueError, match="x must be on the model's device cpu"):
        model(torch.randn(2, 3, 12, device="meta"))
    with pytest.raises(ParameterValueError, match="x_t must be on the model's device cpu"):
        model.step(torch.randn(2, 12, device="meta"), state)
    # RMSNorm's width was torch.ones' (a RuntimeError for -1, a TypeError for a string); a negative
    # eps was taken and refused only at the first call.
    with pytest.raises(ParameterValueError, match="dim must be >= 1"):
        RMSNorm(-1)
    with pytest.raises(ParameterTypeError, match="dim must be an integer"):
        RMSNorm("64")
    with pytest.raises(ParameterValueError, match="eps must be a finite number >= 0"):
        RMSNorm(64, eps=-1.0)
    # A captured step read x_t.shape first (AttributeError for a list) and copy_ cast another dtype
    # silently, where the eager step refuses it. (Stub graph: the checks come before the replay.)
    captured = CapturedStep(SimpleNamespace(replay=lambda: None), torch.zeros(2, 12), None, state, ())
    with pytest.raises(ParameterTypeError, match=r"x_t must be a torch\.Tensor"):
        captured([[0.0] * 12] * 2)
    with pytest.raises(ParameterTypeError, match="x_t must be a tensor of dtype float32"):
        captured(torch.zeros(2, 12, dtype=torch.float64))


def test_rope_base_beyond_float32_is_refused(generator):
    # The frequency table is float32, built from float32(base): 1e39 became inf and every frequency
    # but the first 0, so the model silently rotated one pair of dims only.
    with pytest.raises(ParameterValueError, match=r"rope_base must be a finite number > 1\.0 <= 3\.40"):
        _model(4, rope_base=1e39)
    x = random_tensor((2, 5, 3, 16), generator=generator)
    with pytest.raises(ParameterValueError, match=r"base must be a finite number > 0\.0 <= 3\.40"):
        rope(x, torch.arange(5), 1e39)
    top = torch.finfo(torch.float32).max  # still allowed: the table's frequencies are finite
    assert torch.isfinite(_model(4, rope_base=top)._rope_table(torch.device("cpu"))).all()


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_state_and_rope_table_made_under_inference_mode_work_outside_it(backend, generator, monkeypatch):
    # A model first run under torch.inference_mode cached its rotary table as an inference tensor,
    # which the Triton rope saves for backward: training afterwards raised torch's RuntimeError. A
    # state made there could not be stepped or reset outside it (in-place update of an inference
    # tensor).
    monkeypatch.setenv("NBXSIG_BACKEND", backend)
    model = _model(3)
    x = random_tensor((2, 5, 12), generator=generator)
    with torch.inference_mode():
        full = model(x)
        state = model.init_state(2)
    model(x).square().sum().backward()
    fresh = _model(3)  # the same weights, never run under inference mode
    monkeypatch.setenv("NBXSIG_BACKEND", "torch")
    fresh(x).square().sum().backward()
    monkeypatch.setenv("NBXSIG_BACKEND", backend)
    for (name, p), q in zip(model.named_parameters(), fresh.parameters(), strict=True):
        assert p.grad is not None, name
        assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4, msg=name)
    streamed = torch.stack([model.step(x[:, i], state)[0] for i in range(x.shape[1])], dim=1)
    assert_close(streamed, full, atol=1e-4, rtol=1e-4)
    state.reset()
    with torch.inference_mode():  # and back inside it
        assert_close(model.step(x[:, 0], state)[0], full[:, 0], atol=1e-4, rtol=1e-4)


def test_a_cache_without_window_refuses_a_token_past_its_capacity(generator):
    # Without a window the ring would overwrite the oldest keys: a sliding window the model does not
    # have, and step would no longer equal forward. Capacity tokens are fine; the next one raises.
    model = _model(None)
    x = random_tensor((2, 5, 12), generator=generator)
    state = model.init_state(2, capacity=4)
    with torch.no_grad():
        assert_close(_stream(model, x[:, :4], capacity=4), model(x[:, :4]), atol=1e-4, rtol=1e-4)
        for i in range(4):
            model.step(x[:, i], state)
        with pytest.raises(ParameterValueError, match=r"room for another token.*capacity=4"):
            model.step(x[:, 4], state)
        state.reset()
        model.step(x[:, 4], state)  # room again


def test_rope_positions_may_not_add_dims(generator):
    x = random_tensor((5, 4, 16), generator=generator)
    for backend in ("torch", "triton"):
        with pytest.raises(ParameterValueError, match=r"broadcastable to x's leading dims \(5,\)"):
            rope(x, torch.arange(10).view(2, 5), backend=backend)
        with pytest.raises(ParameterValueError, match=r"leading dims \(\)"):
            rope(x[0], torch.tensor([3]), backend=backend)


@pytest.mark.gpu
def test_gpu_step_forward_and_graph_capture(generator, cuda_device):
    model = _model(8, d_in=32, d_model=256, d_ff=512, n_heads=8, n_kv_heads=2, device=cuda_device)
    x = random_tensor((4, 20, 32), generator=generator, device=cuda_device)
    with torch.no_grad():
        full = model(x)
    assert_close(_stream(model, x), full, atol=1e-4, rtol=1e-4)
    model.quantize(group_size=128)
    with torch.no_grad():
        full_q = model(x)
    eager = _stream(model, x)
    assert_close(eager, full_q, atol=1e-4, rtol=1e-4)
    step = model.capture_step(4)
    graphed = torch.stack([step(x[:, i]).clone() for i in range(x.shape[1])], dim=1)
    assert_close(graphed, eager, atol=1e-5, rtol=1e-5)
    step.reset()
    assert_close(step(x[:, 0]), eager[:, 0], atol=1e-5, rtol=1e-5)


@pytest.mark.gpu
def test_gpu_captured_step_outlives_its_model(generator, cuda_device):
    # The graph reads the weights by address: a step captured from a model that is then dropped and
    # whose memory the allocator hands out again must still compute with the captured weights.
    model = _model(8, d_in=32, d_model=256, d_ff=512, n_heads=8, n_kv_heads=2, device=cuda_device)
    model.quantize(group_size=128)
    x = random_tensor((4, 6, 32), generator=generator, device=cuda_device)
    eager = _stream(model, x)
    step = model.capture_step(4)
    del model
    torch.cuda.empty_cache()
    # Fill whatever memory was freed with values that would poison a stale read.
    junk = [torch.full((1 << 20,), float("nan"), device=cuda_device) for _ in range(64)]
    graphed = torch.stack([step(x[:, i]).clone() for i in range(x.shape[1])], dim=1)
    del junk
    assert_close(graphed, eager, atol=1e-5, rtol=1e-5)


@pytest.mark.gpu
def test_gpu_captured_step_without_window_keeps_to_its_capacity(generator, cuda_device):
    model = _model(None, device=cuda_device)
    x = random_tensor((2, 4, 12), generator=generator, device=cuda_device)
    step = model.capture_step(2, capacity=3)
    with torch.no_grad():
        expected = model(x[:, :3])
    graphed = torch.stack([step(x[:, i]).clone() for i in range(3)], dim=1)
    assert_close(graphed, expected, atol=1e-4, rtol=1e-4)
    with pytest.raises(ParameterValueError, match="capacity=3"):
        step(x[:, 3])
    step.reset()
    assert_close(step(x[:, 0]), expected[:, 0], atol=1e-4, rtol=1e-4)
