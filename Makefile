# `make run` runs the default pipeline on CPU; `make test` lints and runs every test.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
MODELS := model-addition model-reward model-lookup model-guess model-code model-long-cot
SHIPPED := examples/tiny_models

.PHONY: run test lint docs test-fast record-durations model $(MODELS) rebuild-models system-deps clean

# The venv: the project editable, with torch pinned to the CPU wheel (constraints.txt). Its
# bytecode is compiled on every core afterwards (pip compiles file by file); files written
# for newer Pythons do not compile, and are skipped as pip skips them.
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q --no-compile -c constraints.txt -e '.[dev,s3,trackers,hf,lora,agents]'
	$(BIN)/python -m compileall -qq -j 0 $(VENV)/lib || true
	touch $(STAMP)

# Debian packages the sandbox and the UI test need (bubblewrap, python3, libseccomp2,
# chromium, tesseract); installs only what is missing, as root.
system-deps:
	sh scripts/install-system-deps.sh

# The tiny default model, tokenizer and addition data, the tiny reward model, the tiny agent,
# code and long chain-of-thought tasks: the builds shipped in examples/tiny_models, installed
# into .cache/ after every file is checked against its SHA256SUMS (the same weights on every
# CPU; seconds).
model: $(MODELS)

model-addition: $(STAMP)
	$(BIN)/python -m examples.tiny_task --out .cache/tiny

model-reward: $(STAMP)
	$(BIN)/python -m examples.tiny_task.reward_model --out .cache/tiny_rm

model-lookup: $(STAMP)
	$(BIN)/python -m examples.tiny_task --task lookup --out .cache/tiny-lookup

model-guess: $(STAMP)
	$(BIN)/python -m examples.tiny_task --task guess --out .cache/tiny-guess

model-code: $(STAMP)
	$(BIN)/python -m examples.tiny_task --task code --out .cache/tiny-code

model-long-cot: $(STAMP)
	$(BIN)/python -m examples.tiny_task --task long_cot --out .cache/tiny-long-cot

# The recipe: trains every shipped build again on this machine, into examples/tiny_models
# (the weights then depend on this CPU's float kernels: docs/operations/reproducibility.md). For
# maintainers who change a task; the learning tests' bars must be measured again after it.
rebuild-models: $(STAMP)
	$(BIN)/python -m examples.tiny_task --rebuild --out $(SHIPPED)/addition
	$(BIN)/python -m examples.tiny_task.reward_model --rebuild --out $(SHIPPED)/reward_model
	$(BIN)/python -m examples.tiny_task --rebuild --task lookup --out $(SHIPPED)/lookup
	$(BIN)/python -m examples.tiny_task --rebuild --task guess --out $(SHIPPED)/guess
	$(BIN)/python -m examples.tiny_task --rebuild --task code --out $(SHIPPED)/code
	$(BIN)/python -m examples.tiny_task --rebuild --task long_cot --out $(SHIPPED)/long_cot

run: model
	$(BIN)/rldag run pipeline.yaml

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -q -d .cache/site

# The docs site (mkdocs.yml, docs/) at http://127.0.0.1:8000, rebuilt as files change.
docs: $(STAMP)
	$(BIN)/mkdocs serve

# Lint, the models and the system packages side by side (apt while pip installs), then every
# test on two workers, a test file per worker at a time, the longest files first by their
# recorded seconds (tests/durations.json). The project's bytecode is compiled first: where
# PYTHONDONTWRITEBYTECODE is set (as on CI) every process the tests start would compile its
# modules again.
test:
	$(MAKE) --no-print-directory -j3 lint model system-deps
	$(BIN)/python -m compileall -qq -j 0 rldag operators flows tasks tests
	$(BIN)/pytest -n 2 --dist loadfile --no-loadscope-reorder --durations=40

# Every test, as `make test` runs them, writing each file's seconds to tests/durations.json.
record-durations: $(STAMP)
	$(BIN)/pytest -n 2 --dist loadfile --no-loadscope-reorder -q --record-durations

# The quick tier on both cores (under 3 minutes; the slow tier is the learning, Prefect, Ray
# and fault tests).
test-fast: $(STAMP)
	$(BIN)/pytest -n 2 --dist loadfile -m "not slow"

clean:
	rm -rf $(VENV) .cache runs
