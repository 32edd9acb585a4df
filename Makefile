# Set-up and checks. `make demo` and `make test` are the README's two commands; both install what
# they need. `make gpu-test` and `make bench` are for the GPU machine, which reaches no package
# registry: they install nothing from the network (see docs/design.md, "Running on the GPU machine").

PYTHON ?= python3
PIP := $(PYTHON) -m pip
PIP_INSTALL := $(PIP) install --quiet --disable-pip-version-check -c constraints.txt
# Two workers fit the 2-core CI machine; kernels run under Triton's interpreter there.
PYTEST_WORKERS ?= 2
# The GPU-marked tests spend most of their time compiling kernels on the host: eight workers share the
# GPU (H100, twenty-second round: 139 tests in 244 s; one process did not finish in 200 s).
GPU_TEST_WORKERS ?= 8

.PHONY: install install-test demo test lint samples gpu-install gpu-test bench clean

install:
	$(PIP_INSTALL) -e ".[plot]"

install-test:
	$(PIP_INSTALL) -e ".[test]"

# The CLI's main jobs on samples/, outputs under the ignored .out/demo (the command lines are the docs' examples).
DEMO_OUT := .out/demo

demo: install
	$(PYTHON) samples/make_samples.py --check
	rm -rf $(DEMO_OUT)
	nbxsig info samples/
	@echo "--- iSTFT head output (n_fft 20, hop 5) to audio:"
	nbxsig istft samples/spectrogram_nfft20_hop5.npy --n-fft 20 -o $(DEMO_OUT)/istft_head.wav
	@echo "--- STFT of every wav, then back without flags (parameters travel in the .npz):"
	nbxsig stft samples/ --glob '*.wav' --n-fft 512 -o $(DEMO_OUT)/stft
	nbxsig istft $(DEMO_OUT)/stft -o $(DEMO_OUT)/roundtrip
	$(PYTHON) -c "import sys, numpy as np, nbxsig.io as io; \
	  e = [np.abs(io.read_audio(f'samples/{n}.wav').data - io.read_audio(f'$(DEMO_OUT)/roundtrip/{n}.wav').data).max() \
	       for n in ('speech_16k', 'speech_24k', 'music_44k1_stereo')]; \
	  print('stft -> istft round trip, max abs error:', max(e)); sys.exit(int(max(e) > 1e-4))"
	@echo "--- mel features (80 mels, 25 ms / 10 ms), Whisper log-mel, then a resumed run that skips:"
	nbxsig mel samples/ --glob 'speech_*.wav' --sample-rate 16000 -o $(DEMO_OUT)/mel
	nbxsig mel samples/speech_16k.wav --whisper -o $(DEMO_OUT)/whisper/speech_16k.npy
	nbxsig mel samples/ --glob 'speech_*.wav' --sample-rate 16000 -o $(DEMO_OUT)/mel
	@echo "--- resampling, audio and image filters:"
	nbxsig resample samples/music_44k1_stereo.wav --rate 16000 -o $(DEMO_OUT)/music_16k.wav
	nbxsig filter samples/speech_16k.wav --lowpass 1000 -o $(DEMO_OUT)/speech_16k_lowpass.wav
	nbxsig filter samples/ --glob '*.png' --gaussian 2 -o $(DEMO_OUT)/blur
	nbxsig filter samples/ --glob '*.png' --sobel -o $(DEMO_OUT)/sobel
	@echo "--- voice activity (energy + spectral flux on batched mel), drawn over the waveform:"
	nbxsig vad samples/ --glob 'speech_*.wav' -o $(DEMO_OUT)/vad
	nbxsig plot samples/speech_16k.wav --segments $(DEMO_OUT)/vad/speech_16k.json -o $(DEMO_OUT)/plots/speech_16k_vad.png
	nbxsig plot samples/ --glob '*.wav' -o $(DEMO_OUT)/plots
	nbxsig plot $(DEMO_OUT)/mel/speech_16k.npy -o $(DEMO_OUT)/plots/speech_16k_mel.png
	nbxsig info $(DEMO_OUT)


lint:
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .

test: install-test lint
	$(PYTHON) -m pytest -m "not gpu" -n $(PYTEST_WORKERS) -q

samples:
	$(PYTHON) samples/make_samples.py

# GPU machine: no network. Installs the checkout itself without dependencies (the image has them).
gpu-install:
	$(PIP) install --quiet --no-deps --no-build-isolation --no-index -e .

gpu-test: gpu-install
	$(PYTHON) -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'gpu-test needs a CUDA device: torch sees none')"
	NBXSIG_TEST_DEVICE=cuda $(PYTHON) -m pytest -m gpu -q -n $(GPU_TEST_WORKERS) -p no:cacheprovider
	$(PYTHON) -m nbxsig.bench all --quick

bench: gpu-install
	$(PYTHON) -m nbxsig.bench all --markdown bench-report.md

clean:
	rm -rf build dist *.egg-info .pytest_cache .ruff_cache
