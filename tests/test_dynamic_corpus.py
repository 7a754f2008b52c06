"""The dynamic gate against the corpus's CPU-interpreter labels (measured independently by
bench/measure_corpus.py): every candidate measured invariant on the CPU passes, every one
measured variant gets a counterexample. (GPU verdicts are checked on the GPU: docs/dynamic_gate.md.)

Where rows of the batch share one matrix multiply (`linear`: x[T,K] @ W puts rows side by side in a
`tl.dot` tile, which the interpreter hands to the host's BLAS), whether a row's bits depend on its
neighbours is decided by the BLAS kernel this host picks: the labels measured on one host are not
another's (an AMD EPYC host and this test's own host disagree with the recorded ones). There the
gate must run cleanly, but its verdict is not compared with a label measured elsewhere; measure
them on your host with `python bench/measure_corpus.py --device cpu --tasks linear`.

The gate runs in a judge's sandbox, the candidate in its caged runner, as in an audit, over the
gate's CPU sweep (`gates.plan.batch_sizes`, up to 512 rows, as the labels' own sweep): without the
batch beyond the sweep that an audit adds (one of 513 to 768 rows, drawn from a sweep seed). The
labels say nothing above 512 rows, and that batch alone is 30-40 % of the interpreter rows of an
invariant candidate (a row of decode_attention costs about 10 ms). That a kernel switching above the
sweep is caught there is tested in test_dynamic_plan.py; an audit with that batch, sandbox and caged
runner included, in test_audit_cli.py."""

import pytest

from gates.contract import Task, load_suite
from gates.corpus import load_manifest
from gates.dynamic import dynamic_gate
from gates.judge.client import RemoteEntry
from gates.judge.runner_pool import run_gate
from gates.judge.sandbox import Job, Sandbox
from gates.plan import batch_sizes
from gates.verdict import GateResult

HOST_BLAS_TASKS = {"linear"}
"""Tasks whose CPU labels depend on the host's BLAS (see the module docstring)."""

CASES = [(task, entry) for task in load_suite().values() for entry in load_manifest(task).candidates
         if entry.cpu is not None and entry.cpu.label != "broken"]


def swept_dynamic_job(code: str, task: Task, device: str) -> GateResult:
    """`gates.dynamic.dynamic_job` given the sweep's own sizes, so that nothing is drawn beyond it
    (a job of the judge's worker: it imports this module)."""
    sizes = batch_sizes(task, device)
    return run_gate("dynamic", code, task, device,
                    lambda runner, _: dynamic_gate(RemoteEntry(runner), task, device, sizes=sizes))


@pytest.fixture(scope="module")
def box():
    with Sandbox("cpu") as sandbox:
        yield sandbox


@pytest.mark.parametrize("task,entry", CASES, ids=[f"{t.name}/{e.file}" for t, e in CASES])
def test_dynamic_verdict_matches_the_cpu_label(box, task, entry):
    path = task.candidates_dir / entry.file
    outcome = box.run(Job.of(swept_dynamic_job, code=path.read_text(), task=task, device="cpu"), 240)
    assert outcome.ok, outcome.error
    result = outcome.value
    assert result.error is None, result.error
    if task.name in HOST_BLAS_TASKS:
        pytest.skip(f"CPU label of {task.name} depends on the host's BLAS: measured on another host, "
                    "not asserted here")
    if entry.cpu.label == "invariant":
        assert result.passed, result.counterexample
    else:
        assert not result.passed and result.counterexample is not None
