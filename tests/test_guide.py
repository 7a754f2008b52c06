"""docs/guide.md runs as written: its ```sh blocks, in order, in an empty directory, against local
fake servers that speak the OpenAI and Anthropic wire protocols (standing in for vLLM and
Anthropic); its agent-style example proposes a candidate."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_providers_http import FakeServer, Reply

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "guide.md"


def blocks(language: str) -> list[tuple[str, str]]:
    """(section heading, code) of every fenced block of a language, in order."""
    found, section, current = [], "", None
    for line in GUIDE.read_text().splitlines():
        if current is None and line.startswith("## "):
            section = line[3:].strip()
        if current is None and line.strip() == f"```{language}":
            current = []
        elif current is not None and line.strip() == "```":
            found.append((section, "\n".join(current)))
            current = None
        elif current is not None:
            current.append(line)
    return found


def test_every_section_with_commands_has_a_tested_block():
    tested = {section for section, _ in blocks("sh")}
    for section in ("1. Install and try it", "2. Audit your own kernel",
                    "3. Run a campaign with a model on your own server", "4. Run it with Anthropic",
                    "5. Answer the requests yourself: `exchange:`", "6. Read a report", "7. Add a task"):
        assert section in tested, section


@pytest.mark.timeout(900)
def test_the_guides_commands_run(tmp_path):
    kernel = re.search(r"cat > my_rms_norm.py <<'EOF'\n(.*?)\nEOF", GUIDE.read_text(), re.S).group(1)
    answer = f"Here is a kernel.\n```python\n{kernel}\n```\n"
    with FakeServer("openai", [Reply(text=answer)]) as local, \
            FakeServer("anthropic", [Reply(text=answer)]) as anthropic:
        script = "set -euo pipefail\n" + "\n".join(code for _, code in blocks("sh"))
        script = script.replace("http://localhost:8000/v1", local.url)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("OPENAI_", "ANTHROPIC_", "AGENTLOOP_"))}
        env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
                   TRITON_INTERPRET="1", ANTHROPIC_BASE_URL=anthropic.url)
        done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=850)
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
        assert local.seen and local.seen[0].body["model"] == "Qwen/Qwen2.5-Coder-32B-Instruct"
        assert anthropic.seen and anthropic.seen[0].body["model"] == "claude-sonnet-4-5"
    assert json.loads((tmp_path / "verdict.json").read_text())["verdict"] == "accept"
    for run in ("mine-local", "mine-anthropic", "mine-exchange"):
        summary = json.loads((tmp_path / "runs" / run / "summary.json").read_text())
        assert [c["tasks"] for c in summary["cells"]] == [1], run
    assert "scaled_gelu" in done.stdout  # the added task is listed, and its audit passed (set -e)
    assert "idle: 1 request waits" in done.stdout


def test_the_style_example_proposes_a_candidate():
    from agentloop.loop.prompts import Prompts, task_brief
    from agentloop.loop.state import LoopState
    from agentloop.loop.styles.base import Proposing
    from gates.contract import get_task

    ((_, code),) = blocks("python")
    namespace: dict = {}
    exec(compile(code, str(GUIDE), "exec"), namespace)  # noqa: S102 - the guide's own example

    class Coder:
        asked: list = []

        def ask(self, role, messages, seed):
            self.asked.append((role, messages, seed))
            code = "def rms_norm(x, weight, eps):\n    return x\n"
            return type("Answer", (), {"text": f"```python\n{code}```"})()

        def calls_left(self):
            return None

    task = get_task("rms_norm")
    coder = Coder()
    proposing = Proposing(state=LoopState(task="rms_norm"), task=task, mode="bi-aware", prompts=Prompts(),
                          brief=task_brief(task, "cpu"), llm=coder, seeds=[7, 8])
    proposals = namespace["FreshStyle"]().propose(proposing)
    assert [p.seed for p in proposals] == [7, 8] and all("def rms_norm" in p.answer for p in proposals)
    assert coder.asked[0][0] == "coder" and "rms_norm" in coder.asked[0][1][-1].content
