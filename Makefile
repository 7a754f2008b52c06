PY ?= python3
VENV ?= .venv
BIN = $(VENV)/bin
RUNS ?= runs
DEMO ?= tasks/campaigns/demo.yaml

.PHONY: install demo test lint clean

$(BIN)/agentloop: pyproject.toml
	$(PY) -m venv $(VENV)
	# CPU torch first, so the dependency range does not pull a multi-GB CUDA build
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev,ray,models,openevolve]'
	touch $@

install: $(BIN)/agentloop

# An offline campaign: replay provider, all three styles, both modes, 4 tasks, on the CPU.
# Each run writes a new directory, runs/demo-<date>-<time>, so the demo runs again and again.
demo: install
	TRITON_INTERPRET=1 $(BIN)/agentloop tasks
	TRITON_INTERPRET=1 $(BIN)/agentloop run $(DEMO) --out $(RUNS)/demo-$$(date +%Y%m%d-%H%M%S)

test: install
	$(BIN)/ruff check .
	TRITON_INTERPRET=1 $(BIN)/pytest -q -n 2 tests

lint: install
	$(BIN)/ruff check .

# Removes the virtual environment and the demo runs (never other runs), saying which.
clean:
	@removed=0; for path in $(VENV) $(RUNS)/demo $(RUNS)/demo-*; do \
		if [ -e "$$path" ]; then echo "removing $$path"; rm -rf "$$path"; removed=1; fi; \
	done; [ $$removed = 1 ] || echo "nothing to remove ($(VENV) and $(RUNS)/demo-* do not exist)"
