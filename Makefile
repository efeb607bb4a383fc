# The two set-up commands: `make demo` and `make test` each create .venv and install what they need.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.14.1 torchvision==0.29.1
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/forklift demo

# Everything: lint, types, every test. What CI runs.
test: lint
	$(BIN)/pytest -q

# The inner loop: lint, types and the tests not marked slow (under 2 minutes on 2 cores).
test-fast: lint
	$(BIN)/pytest -q -m "not slow"

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/python bench/predict.py --no-spin
	$(BIN)/python bench/serve/run.py

clean:
	rm -rf $(VENV) build out
