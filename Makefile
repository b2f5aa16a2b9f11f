# Two entry points for a new user: `make demo` and `make test`. Both build the venv themselves.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_OUT ?= demo_out

.PHONY: demo test bench clean

# torch/torchvision are pinned first so pip takes the local CPU-capable wheels;
# users on GPUs may install their own torch before `pip install -e .`.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.14.1 torchvision==0.29.1
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	HF_HUB_OFFLINE=1 $(VENV)/bin/icir demo --out $(DEMO_OUT)

test: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -n 2 tests

bench: $(STAMP)
	$(PY) bench/build_icir.py

clean:
	rm -rf $(VENV) $(DEMO_OUT)
