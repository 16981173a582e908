# `make run` runs the default pipeline on CPU; `make test` lints and runs every test.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint test-fast model system-deps clean

# The venv: the project editable, with torch pinned to the CPU wheel (constraints.txt).
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[dev,s3,trackers,hf,lora,agents]'
	touch $(STAMP)

# Debian packages the sandbox and the UI test need (bubblewrap, python3, libseccomp2,
# chromium, tesseract); installs only what is missing, as root.
system-deps:
	sh scripts/install-system-deps.sh

# The tiny default model, tokenizer and addition data, the tiny reward model and the tiny
# agent tasks (deterministic, cached).
model: $(STAMP)
	$(BIN)/python -m operators.tiny_task --out .cache/tiny
	$(BIN)/python -m operators.tiny_task.reward_model --out .cache/tiny_rm --tokenizer .cache/tiny/model
	$(BIN)/python -m operators.tiny_task --task lookup --out .cache/tiny-lookup
	$(BIN)/python -m operators.tiny_task --task guess --out .cache/tiny-guess

run: model
	$(BIN)/rldag run pipeline.yaml

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

test: lint model system-deps
	$(BIN)/pytest

test-fast: $(STAMP)
	$(BIN)/pytest -m "not slow"

clean:
	rm -rf $(VENV) .cache runs
