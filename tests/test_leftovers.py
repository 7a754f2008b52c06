"""Nothing is left behind after a clean exit (issue 29): no SQLite `-wal`/`-shm` file beside a
database the project wrote (results, checkpoints, the kernel archive), and no agentloop-/gates-
folder (a worker's, a pool's kernel store, a runner's) in the temporary directory.

Each command runs in a process of its own with a private TMPDIR, so the folders counted are its
own, whatever the tests running beside it create."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from agentloop.results.store import Store, StoreFrozen

CAMPAIGN = {"name": "leftovers", "tasks": ["rms_norm"], "styles": ["refine"], "modes": ["baseline"],
            "model": "replay", "budget": {"iterations": 1}, "device": "cpu", "workers": 1}
OURS = ("agentloop-", "gates-", "runner-")
SIDECARS = ("-wal", "-shm", "-journal")
CANDIDATE = Path(__file__).parent / "fixtures" / "pool" / "rms_norm_rows.py"


def _env(tmpdir: Path) -> dict[str, str]:
    return {**os.environ, "TRITON_INTERPRET": "1", "TMPDIR": str(tmpdir)}


def _cli(args: list, tmpdir: Path, cwd: Path) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "agentloop.cli", *map(str, args)], cwd=cwd, env=_env(tmpdir),
                          capture_output=True, text=True, timeout=500)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def _sidecars(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.name.endswith(SIDECARS))


def _ours(tmpdir: Path) -> list[str]:
    return sorted(p.name for p in tmpdir.iterdir() if p.name.startswith(OURS))


@pytest.fixture(scope="module")
def campaign_run(tmp_path_factory):
    """A one-task, one-iteration replay campaign run by `agentloop run` (its pool evaluates the
    candidate in a worker), then `status` and `report` on it, and an `audit` (in a sandbox of its
    own): what each left."""
    root = tmp_path_factory.mktemp("leftovers")
    # Side by side: a command's directory above its TMPDIR would be on the runners' sys.path
    # (`python -m`), and the cage would then keep their work directories from them.
    tmpdir, work = root / "tmp", root / "work"
    tmpdir.mkdir()
    work.mkdir()
    (work / "c.yaml").write_text(yaml.safe_dump(CAMPAIGN))
    left = {}
    _cli(["run", work / "c.yaml", "--out", work / "runs" / "c"], tmpdir, work)
    left["run"] = (_sidecars(root), _ours(tmpdir))
    for command in ("status", "report"):
        _cli([command, work / "runs" / "c"], tmpdir, work)
        left[command] = (_sidecars(root), _ours(tmpdir))
    # Exit 0: accepted, so its runners ran in this TMPDIR.
    _cli(["audit", CANDIDATE, "--task", "rms_norm", "--gate", "correctness"], tmpdir, work)
    left["audit"] = (_sidecars(root), _ours(tmpdir))
    return work, left


def test_run_status_report_and_audit_leave_only_the_database_files(campaign_run):
    work, left = campaign_run
    run = work / "runs" / "c"
    # The databases are there (the archive beside the run directory), their side files are not.
    assert (run / "results.sqlite").is_file() and (run / "checkpoints.sqlite").is_file()
    assert (work / "runs" / "archive.sqlite").is_file()
    for command, (sidecars, _) in left.items():
        assert sidecars == [], f"after agentloop {command}"


def test_run_status_report_and_audit_leave_no_temporary_folder(campaign_run):
    work, left = campaign_run
    for command, (_, folders) in left.items():
        assert folders == [], f"after agentloop {command}"
    # The run's candidate went through a worker and its runners: their folders were made.
    with Store(work / "runs" / "c" / "results.sqlite") as store:
        compiled = store.query("SELECT passed, error FROM gate_results WHERE gate = 'compile'")
    assert compiled and all(r["passed"] for r in compiled), compiled


POOL = """
import os, sys
from pathlib import Path
from agentloop.evaluation.pool import WorkerPool
from agentloop.evaluation.stages import EvalSettings
from gates.contract import get_task

def listing():
    print(" ".join(sorted(os.listdir(os.environ["TMPDIR"]))) or "-")

pool = WorkerPool("cpu", workers=1)
outcomes = pool.evaluate(Path(sys.argv[1]).read_text(), get_task("rms_norm"), EvalSettings(),
                         stages=("compile", "correctness"))
print("passed" if all(o.passed for o in outcomes) else [o.error for o in outcomes])
listing()
pool.close()
listing()
left_open = WorkerPool("cpu", workers=1)
left_open.warm_up()
listing()
"""


def test_an_evaluation_through_the_pool_leaves_no_temporary_folder(tmp_path):
    """A pool closed by its owner, and one still open when the process ends: each worker's
    folder (the runners' folders inside it) and each pool's kernel store are removed."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    done = subprocess.run([sys.executable, "-c", POOL, str(CANDIDATE)], env=_env(tmpdir),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    passed, evaluating, closed, left_open = done.stdout.splitlines()[-4:]
    assert passed == "passed"
    # While a pool runs its folders are in this TMPDIR, so that counting them afterwards means something.
    for during in (evaluating, left_open):
        kinds = {n.split("-")[1] for n in during.split() if n.startswith("agentloop-")}
        assert kinds == {"worker", "kernels"}, during
    assert closed == "-"
    assert _ours(tmpdir) == []


KILLED = """
import os, signal
from agentloop.evaluation.pool import WorkerPool

pool = WorkerPool("cpu", workers=1)
pool.warm_up()
print(" ".join(sorted(os.listdir(os.environ["TMPDIR"]))), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_workers_of_a_killed_pool_remove_their_folders_and_its_kernel_store(tmp_path):
    """The pool's process killed (SIGKILL: nothing of it runs): its workers, left without a
    parent, remove their own folders and the pool's kernel store before they exit."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    done = subprocess.run([sys.executable, "-c", KILLED], env=_env(tmpdir), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == -signal.SIGKILL, done.stdout + done.stderr
    kinds = {n.split("-")[1] for n in done.stdout.split() if n.startswith("agentloop-")}
    assert kinds == {"worker", "kernels"}, done.stdout
    deadline = time.monotonic() + 20
    while _ours(tmpdir) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _ours(tmpdir) == []


STORES = """
import sys, threading, time
from agentloop.campaign.run import checkpointer
from agentloop.results.archive import open_archive
from agentloop.results.store import Store

Store(sys.argv[1] + "/dropped.sqlite").add_candidate(
    cell="c", task="t", style="s", mode="m", provider="p", iteration=0, hash="h", status="rejected")
kept = Store(sys.argv[1] + "/kept.sqlite")  # still open at exit
kept.add_exchange(cell="c", task="t", role="coder", request_hash="h", request="[]", response="r",
                  provider="p", model="m", input_tokens=0, output_tokens=0, latency_s=0.0)
archive = open_archive(sys.argv[1] + "/archive.sqlite")  # the process's own archive, never closed
saver = checkpointer(sys.argv[1] + "/checkpoints.sqlite")
saver.setup()
# As a loop thread that a stopped run cut short holds its context: Python never frees what a
# daemon thread still refers to at exit, so only a close at exit removes the side files.
held = threading.Thread(target=lambda *objects: time.sleep(60), args=(kept, archive, saver), daemon=True)
held.start()
"""


def test_stores_left_open_are_closed_at_exit(tmp_path):
    """A store or checkpointer nobody closed (the kernel archive kept for the process, one a daemon
    thread still holds, one dropped unclosed) is closed when the process ends: only the database
    files stay."""
    done = subprocess.run([sys.executable, "-c", STORES, str(tmp_path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["archive.sqlite", "checkpoints.sqlite",
                                                            "dropped.sqlite", "kept.sqlite"]
    with Store(tmp_path / "kept.sqlite") as kept:
        assert len(kept.query("SELECT * FROM exchanges")) == 1  # what was written is kept


def test_a_closed_store_refuses_use_and_a_frozen_one_says_the_run_stopped(tmp_path):
    store = Store(tmp_path / "a.sqlite")
    store.close()
    store.close()  # again: nothing
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.sqlite"]
    with pytest.raises(Exception, match="closed"):
        store.task_results()
    frozen = Store(tmp_path / "b.sqlite")
    frozen.freeze()
    frozen.close()
    with pytest.raises(StoreFrozen):  # a thread a stopped run cut short gets what a write gets
        frozen.candidates()


def test_side_files_wait_for_the_last_reader(tmp_path):
    """Closing is right while another connection reads: SQLite keeps the WAL for it, and the
    last connection to close removes it."""
    writer = Store(tmp_path / "r.sqlite")
    reader = Store(tmp_path / "r.sqlite")
    writer.finish_task(cell="c", task="t", style="s", mode="m", provider="p", correct=1, bi_pass=1,
                       llm_calls=0, input_tokens=0, output_tokens=0, wall_s=0.0)
    writer.close()
    assert len(reader.task_results()) == 1
    assert _sidecars(tmp_path)  # the reader still has the database open
    reader.close()
    assert _sidecars(tmp_path) == []
