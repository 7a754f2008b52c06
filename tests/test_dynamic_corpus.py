"""The dynamic gate against the corpus's CPU-interpreter labels (measured independently by
bench/measure_corpus.py): every candidate measured invariant on the CPU passes, every one
measured variant gets a counterexample. (GPU verdicts are checked on the GPU: docs/dynamic_gate.md.)"""

import pytest

from gates.contract import load_suite
from gates.corpus import load_manifest
from gates.sandbox import Job, Sandbox

CASES = [(task, entry) for task in load_suite().values() for entry in load_manifest(task).candidates
         if entry.cpu is not None and entry.cpu.label != "broken"]


@pytest.fixture(scope="module")
def box():
    with Sandbox("cpu") as sandbox:
        yield sandbox


@pytest.mark.parametrize("task,entry", CASES, ids=[f"{t.name}/{e.file}" for t, e in CASES])
def test_dynamic_verdict_matches_the_cpu_label(box, task, entry):
    path = task.candidates_dir / entry.file
    outcome = box.run(Job("gates.dynamic:dynamic_job", {"candidate": str(path), "task": task,
                                                         "device": "cpu"}), 240)
    assert outcome.ok, outcome.error
    result = outcome.value
    assert result.error is None, result.error
    if entry.cpu.label == "invariant":
        assert result.passed, result.counterexample
    else:
        assert not result.passed and result.counterexample is not None
