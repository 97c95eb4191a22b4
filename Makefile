# Two commands do all set-up on a fresh machine (Python >= 3.9 with pip):
#   make demo   install, then show the diff the rules make on the bundled example model
#   make test   install, then run the test suite
PYTHON ?= python3
PIP := $(PYTHON) -m pip

.PHONY: install demo test bench-scan bench-kernels bench-gpu

install:
	$(PIP) install --quiet --disable-pip-version-check -c constraints.txt -e '.[test,bench,triton]'

demo: install
	$(PYTHON) -m adopter_codemods demo

test: install
	$(PYTHON) -m pytest

bench-scan: install
	$(PYTHON) benchmarks/bench_scan.py

bench-kernels: install
	$(PYTHON) benchmarks/bench_kernels.py

# On a CUDA machine, with a CUDA torch already installed (no `install`: constraints.txt pins the CPU wheel).
bench-gpu:
	PYTHON=$(PYTHON) sh gpu_bench/run_gpu.sh
