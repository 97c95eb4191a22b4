# Two commands do all set-up on a fresh machine (Python >= 3.9 with pip):
#   make demo   install, then show the diff the rules make on the bundled example model
#   make test   install, then run the test suite
PYTHON ?= python3
PIP := $(PYTHON) -m pip

.PHONY: install demo test bench-scan

install:
	$(PIP) install --quiet --disable-pip-version-check -c constraints.txt -e '.[test,bench,triton]'

demo: install
	$(PYTHON) -m adopter_codemods demo

test: install
	$(PYTHON) -m pytest

bench-scan: install
	$(PYTHON) benchmarks/bench_scan.py
