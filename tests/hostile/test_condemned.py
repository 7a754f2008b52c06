"""An audit spends no time on a candidate a gate has condemned: once a gate rejects it with a
sandbox (SB) or anti-cheat (AC) finding, the later gates are skipped, the JSON says which and
why, and `--all-gates` runs them anyway (`gates/audit.py`)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CANDIDATE = """
import socket

import torch


def rms_norm(x, weight, eps):
    try:  # nothing listens there; the cage refuses the socket anyway
        socket.socket(socket.AF_INET, socket.SOCK_STREAM).connect(("127.0.0.1", 47631))
    except Exception:
        pass
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
"""

pytestmark = pytest.mark.hostile


def audit(path: Path, *extra: str) -> tuple[dict, float]:
    start = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentloop",
            "audit",
            str(path),
            "--task",
            "rms_norm",
            "--device",
            "cpu",
            "--json",
            *extra,
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "TRITON_INTERPRET": "1"},
        timeout=300,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    return json.loads(done.stdout), time.monotonic() - start


def test_later_gates_are_skipped_after_a_sandbox_finding(tmp_path):
    path = tmp_path / "socket_then_honest.py"
    path.write_text(CANDIDATE)
    verdict, wall = audit(path)
    gates = {g["gate"]: g for g in verdict["gates"]}
    assert [f["rule"] for f in gates["dynamic"]["findings"]] == ["SB001"]
    assert verdict["skipped"] == [
        {"gate": "correctness", "why": gates["correctness"]["error"][len("skipped: ") :]}
    ]
    assert "SB001" in verdict["skipped"][0]["why"] and "--all-gates" in verdict["skipped"][0]["why"]
    assert gates["correctness"]["seconds"] == 0 and not gates["correctness"]["findings"]
    # What the audit spent after the finding: everything but the gates that ran.
    after = verdict["seconds"] - gates["static"]["seconds"] - gates["dynamic"]["seconds"]
    assert after < 10, f"{after:.1f} s after the dynamic gate's SB001 (wall {wall:.1f} s)"


def test_all_gates_runs_them_anyway(tmp_path):
    path = tmp_path / "socket_then_honest.py"
    path.write_text(CANDIDATE)
    verdict, _ = audit(path, "--all-gates", "--gate", "dynamic", "--gate", "correctness")
    assert "skipped" not in verdict
    gates = {g["gate"]: g for g in verdict["gates"]}
    assert "SB001" in {f["rule"] for f in gates["correctness"]["findings"]}
