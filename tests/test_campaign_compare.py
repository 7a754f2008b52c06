"""bench/campaign_compare.py: the figures quoted for the trust boundary's GPU runs (#12) come
from real results databases, written here by the run's own Store."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from agentloop.results.store import Store

ROOT = Path(__file__).resolve().parents[1]
CANDIDATES = ROOT / "tasks" / "softmax" / "candidates"


def _run(tmp_path: Path, name: str, judged: list[tuple[str, dict[str, bool], str | None]]) -> Path:
    """A results database where each (code, {gate: passed}, error) was judged once."""
    path = tmp_path / name
    store = Store(path)
    for code, gates, error in judged:
        cid = store.add_candidate(cell="refine/bi-aware/replay", task="softmax", style="refine",
                                  mode="bi-aware", provider="replay", iteration=1, hash=str(hash(code)),
                                  code=code, status="accepted")
        for gate, passed in gates.items():
            store.add_gate_result(cid, gate, passed, True, 0.1, [], error=None if passed else error)
    store.close()
    return path


def _compare(*args: str) -> str:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "campaign_compare.py"), *args],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    return done.stdout


def test_labels_counts_the_corpus_files_judged_as_their_gpu_labels_say(tmp_path):
    invariant = (CANDIDATES / "online_row.py").read_text()
    variant = (CANDIDATES / "autotuned.py").read_text()
    db = _run(tmp_path, "a.sqlite", [
        # the right verdicts, trailing blanks aside
        (invariant + "\n\n", {"compile": True, "dynamic": True, "correctness": True}, None),
        (variant, {"compile": True, "static": True, "dynamic": False}, "batch-variant"),
        # not a corpus file: not counted
        ("def kernel(): pass\n", {"compile": False}, "SyntaxError"),
    ])
    wrong = _run(tmp_path, "b.sqlite", [
        (invariant, {"compile": True, "dynamic": False}, "out of memory"),
        (variant, {"compile": True, "static": True, "dynamic": True, "correctness": True}, None),
    ])
    out = _compare("labels", str(db), str(wrong))
    assert f"{db}: 2 of 2 corpus files judged as labelled" in out
    assert f"{wrong}: 0 of 2 corpus files judged as labelled" in out
    assert "softmax/online_row.py: labelled invariant, failed dynamic" in out
    assert "softmax/autotuned.py: labelled variant, passed compile, correctness, dynamic, static" in out


def test_verdicts_lists_what_changed_and_counts_failures_for_memory(tmp_path):
    code = (CANDIDATES / "online_row.py").read_text()
    before = _run(tmp_path, "old.sqlite", [(code, {"dynamic": True}, None)])
    after = _run(tmp_path, "new.sqlite", [(code, {"dynamic": False}, "OutOfMemoryError: CUDA out of memory")])
    out = _compare("verdicts", str(before), str(after))
    assert "1 of 1 kernel-gates had different verdicts" in out
    assert "FAIL (memory: OutOfMemoryError: CUDA out of memory)" in out
    assert f"{before}: 0 failures for memory" in out and f"{after}: 1 failures for memory" in out


def test_a_missing_database_is_one_line_and_creates_nothing(tmp_path):
    missing = tmp_path / "nowhere.sqlite"
    script = str(ROOT / "bench" / "campaign_compare.py")
    done = subprocess.run([sys.executable, script, "labels", str(missing)], cwd=ROOT, capture_output=True,
                          text=True)
    assert done.returncode == 2 and f"{missing}: no such file" in done.stderr.splitlines()[-1]
    assert not missing.exists()
