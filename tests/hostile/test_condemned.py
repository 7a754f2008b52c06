"""An audit spends no time on a candidate a gate has condemned: once a gate rejects it with a
sandbox (SB) or anti-cheat (AC) finding, the later gates are skipped, the JSON says which and
why, and `--all-gates` runs them anyway (`gates/audit.py`)."""

import json
import os
import subprocess
import sys
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


def audit(path: Path, *extra: str) -> dict:
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
    return json.loads(done.stdout)


def test_later_gates_are_skipped_after_a_sandbox_finding(tmp_path):
    path = tmp_path / "socket_then_honest.py"
    path.write_text(CANDIDATE)
    verdict = audit(path)
    gates = {g["gate"]: g for g in verdict["gates"]}
    assert [f["rule"] for f in gates["dynamic"]["findings"]] == ["SB001"]
    assert verdict["skipped"] == [
        {"gate": "correctness", "why": gates["correctness"]["error"][len("skipped: ") :]}
    ]
    assert "SB001" in verdict["skipped"][0]["why"] and "--all-gates" in verdict["skipped"][0]["why"]
    # The gate after the finding never ran: it spent no time and left no findings.
    assert gates["correctness"]["seconds"] == 0 and not gates["correctness"]["findings"]


def test_all_gates_runs_them_anyway(tmp_path):
    path = tmp_path / "socket_then_honest.py"
    path.write_text(CANDIDATE)
    verdict = audit(path, "--all-gates", "--gate", "dynamic", "--gate", "correctness")
    assert "skipped" not in verdict
    gates = {g["gate"]: g for g in verdict["gates"]}
    assert "SB001" in {f["rule"] for f in gates["correctness"]["findings"]}
