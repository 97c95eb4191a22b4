# Two commands do all set-up on a fresh machine (Python >= 3.9 with pip):
#   make demo   install, then show the diff the rules make on the bundled example model
#   make test   install, then run the test suite
PYTHON ?= python3
PIP := $(PYTHON) -m pip

.PHONY: install demo test bench-scan

# Both distributions of this repository, editable: the runtime kernels (kernels/, adopter-kernels) and the
# codemods with the test and benchmark tools; `.[triton]` pulls adopter-kernels[triton], satisfied by the first.
install:
	$(PIP) install --quiet --disable-pip-version-check -c constraints.txt -e './kernels[triton]' -e '.[test,bench,triton]'

demo: install
	$(PYTHON) -m adopter_codemods demo

test: install
	$(PYTHON) -m pytest

bench-scan: install
	$(PYTHON) benchmarks/bench_scan.py
