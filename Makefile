# Two commands do all set-up on a fresh machine (Python >= 3.9 with pip):
#   make demo   install, then show the diff the rules make on the bundled example model
#   make test   install, then run the test suite
PYTHON ?= python3
PIP := $(PYTHON) -m pip

.PHONY: install demo test bench-scan bench-kernels bench-gpu newest-transformers model-zoo

# Both distributions of this repository, editable: the runtime kernels (kernels/, adopter-kernels) and the
# codemods with the test and benchmark tools; `.[triton]` pulls adopter-kernels[triton], satisfied by the first.
install:
	$(PIP) install --quiet --disable-pip-version-check -c constraints.txt -e './kernels[triton]' -e '.[test,bench,triton]'

demo: install
	$(PYTHON) -m adopter_codemods demo

# One pytest worker per core, at most TEST_JOBS (each holds torch and a model zoo in memory); a file's tests stay
# in one worker, so its module fixtures (the vision acceptance run, built wheels) run once.
TEST_JOBS ?= 4
test: install newest-transformers model-zoo
	$(PYTHON) -m pytest -n auto --maxprocesses $(TEST_JOBS) --dist loadfile

# The newest transformers 4.x beside the pinned 4.34.1, for tests/test_real_llm_blocks.py (run in a subprocess
# with this directory on PYTHONPATH); its own dependencies that 4.34.1's pins would conflict with go there too.
NEWEST_TRANSFORMERS := 4.57.6
NEWEST_DIR := .cache/transformers-$(NEWEST_TRANSFORMERS)

newest-transformers: $(NEWEST_DIR)/transformers

$(NEWEST_DIR)/transformers:
	$(PIP) install --quiet --disable-pip-version-check --no-deps --target $(NEWEST_DIR) \
		transformers==$(NEWEST_TRANSFORMERS) tokenizers==0.22.2 huggingface-hub==0.36.2 safetensors==0.8.0

# Real model sources for the acceptance tests (tests/model_zoo.py), each in its own --target directory so the
# project's pins stay as they are: transformers 5.x (run in a subprocess: it needs huggingface-hub 1.x and tokenizers
# 0.23, which 4.34.1 cannot import), torchvision + timm (importable in process from the CPU wheel once
# tests/model_zoo.py has kept torchvision from registering kernels for its compiled operators), and vit-pytorch with
# einops (its model files need only torch and einops).
TRANSFORMERS5 := 5.23.0
TRANSFORMERS5_DIR := .cache/transformers-$(TRANSFORMERS5)
VISION_DIR := .cache/vision-models
VIT_PYTORCH_DIR := .cache/vit-pytorch

model-zoo: $(TRANSFORMERS5_DIR)/transformers $(VISION_DIR)/timm $(VIT_PYTORCH_DIR)/vit_pytorch

$(TRANSFORMERS5_DIR)/transformers:
	$(PIP) install --quiet --disable-pip-version-check --no-deps --target $(TRANSFORMERS5_DIR) \
		transformers==$(TRANSFORMERS5) tokenizers==0.23.1 huggingface-hub==1.31.0 httpx==0.28.1 httpcore==1.0.9 \
		h11==0.16.0 anyio==4.11.0 sniffio==1.3.1 certifi==2026.10.18 idna==3.20

$(VISION_DIR)/timm:
	$(PIP) install --quiet --disable-pip-version-check --no-deps --target $(VISION_DIR) torchvision==0.28.0 timm==1.0.31

$(VIT_PYTORCH_DIR)/vit_pytorch:
	$(PIP) install --quiet --disable-pip-version-check --no-deps --target $(VIT_PYTORCH_DIR) vit-pytorch==1.26.11 einops==0.8.2

bench-scan: install
	$(PYTHON) benchmarks/bench_scan.py

bench-kernels: install
	$(PYTHON) benchmarks/bench_kernels.py

# On a CUDA machine, with a CUDA torch already installed (no `install`: constraints.txt pins the CPU wheel).
bench-gpu:
	PYTHON=$(PYTHON) sh gpu_bench/run_gpu.sh
