# Set-up and checks. `make demo` and `make test` are the README's two commands; both install what
# they need. `make gpu-test` and `make bench` are for the GPU machine, which reaches no package
# registry: they install nothing from the network (see docs/design.md, "Running on the GPU machine").

PYTHON ?= python3
PIP := $(PYTHON) -m pip
PIP_INSTALL := $(PIP) install --quiet --disable-pip-version-check -c constraints.txt
# Two workers fit the 2-core CI machine; kernels run under Triton's interpreter there.
PYTEST_WORKERS ?= 2

.PHONY: install install-test demo test lint samples gpu-install gpu-test bench clean

install:
	$(PIP_INSTALL) -e .

install-test:
	$(PIP_INSTALL) -e ".[test]"

demo: install
	$(PYTHON) samples/make_samples.py --check
	nbxsig --version


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
	NBXSIG_TEST_DEVICE=cuda $(PYTHON) -m pytest -m gpu -q -p no:cacheprovider
	$(PYTHON) -m nbxsig.bench all --quick

bench: gpu-install
	$(PYTHON) -m nbxsig.bench all --markdown docs/benchmarks.md

clean:
	rm -rf build dist *.egg-info .pytest_cache .ruff_cache
