"""`make demo` runs again and again (a new run directory each time); `make clean` says what it
removes and removes nothing else."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _make(*args: str) -> subprocess.CompletedProcess:
    # -o: never rebuild the virtual environment from here, whatever the file times say.
    return subprocess.run(["make", "-C", str(ROOT), "-o", ".venv/bin/agentloop", *args],
                          capture_output=True, text=True, timeout=600)


@pytest.mark.timeout(600)
def test_make_demo_twice_writes_two_runs(tmp_path):
    demo = tmp_path / "demo.yaml"
    demo.write_text(yaml.safe_dump({"name": "demo", "tasks": ["rms_norm"], "styles": ["refine"],
                                    "modes": ["bi-aware"], "model": "replay", "budget": {"iterations": 1},
                                    "device": "cpu", "workers": 1}))
    runs = tmp_path / "runs"
    for _ in range(2):
        done = _make("demo", f"DEMO={demo}", f"RUNS={runs}")
        assert done.returncode == 0, done.stdout + done.stderr
        time.sleep(1.1)  # the run directory is named to the second
    made = sorted(runs.glob("demo-*"))
    assert len(made) == 2 and all((d / "report.md").is_file() for d in made)


def test_make_clean_says_what_it_removes(tmp_path):
    venv, runs = tmp_path / "venv", tmp_path / "runs"
    for d in (venv, runs / "demo-20250101-000000", runs / "mine"):
        d.mkdir(parents=True)
    done = _make("clean", f"VENV={venv}", f"RUNS={runs}")
    assert done.returncode == 0, done.stderr
    assert f"removing {venv}" in done.stdout and f"removing {runs / 'demo-20250101-000000'}" in done.stdout
    assert not venv.exists() and [p.name for p in runs.iterdir()] == ["mine"]
    again = _make("clean", f"VENV={venv}", f"RUNS={runs}")
    assert "nothing to remove" in again.stdout
