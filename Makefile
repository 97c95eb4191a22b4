# Two commands do all set-up on a fresh machine (Python >= 3.9 with pip):
#   make demo   install, then show the diff the rules make on the bundled example model
#   make test   install, then run the test suite
PYTHON ?= python3
PIP := $(PYTHON) -m pip

.PHONY: install demo test bench-scan bench-kernels bench-gpu newest-transformers

# Both distributions of this repository, editable: the runtime kernels (kernels/, adopter-kernels) and the
# codemods with the test and benchmark tools; `.[triton]` pulls adopter-kernels[triton], satisfied by the first.
install:
	$(PIP) install --quiet --disable-pip-version-check -c constraints.txt -e './kernels[triton]' -e '.[test,bench,triton]'

demo: install
	$(PYTHON) -m adopter_codemods demo

test: install newest-transformers
	$(PYTHON) -m pytest

# The newest transformers 4.x beside the pinned 4.34.1, for tests/test_real_llm_blocks.py (run in a subprocess
# with this directory on PYTHONPATH); its own dependencies that 4.34.1's pins would conflict with go there too.
NEWEST_TRANSFORMERS := 4.57.6
NEWEST_DIR := .cache/transformers-$(NEWEST_TRANSFORMERS)

newest-transformers: $(NEWEST_DIR)/transformers

$(NEWEST_DIR)/transformers:
	$(PIP) install --quiet --disable-pip-version-check --no-deps --target $(NEWEST_DIR) \
		transformers==$(NEWEST_TRANSFORMERS) tokenizers==0.22.2 huggingface-hub==0.36.2 safetensors==0.8.0

bench-scan: install
	$(PYTHON) benchmarks/bench_scan.py

bench-kernels: install
	$(PYTHON) benchmarks/bench_kernels.py

# On a CUDA machine, with a CUDA torch already installed (no `install`: constraints.txt pins the CPU wheel).
bench-gpu:
	PYTHON=$(PYTHON) sh gpu_bench/run_gpu.sh
