PY ?= python3
VENV ?= .venv
BIN = $(VENV)/bin

.PHONY: install demo test lint clean

$(BIN)/agentloop: pyproject.toml
	$(PY) -m venv $(VENV)
	# CPU torch first, so the dependency range does not pull a multi-GB CUDA build
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

install: $(BIN)/agentloop

# An offline campaign: replay provider, all three styles, both modes, 4 tasks, on the CPU.
demo: install
	TRITON_INTERPRET=1 $(BIN)/agentloop tasks
	TRITON_INTERPRET=1 $(BIN)/agentloop run tasks/campaigns/demo.yaml --out runs/demo

test: install
	$(BIN)/ruff check .
	TRITON_INTERPRET=1 $(BIN)/pytest -q -n 2 tests

lint: install
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV)
