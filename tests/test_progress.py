"""The run's progress display: each loop's stage, a resumed loop's count, the ETA column, the
exchange file a loop waits for, and -v logging each stage."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

from rich.console import Console

from agentloop.campaign.run import LoopProgress, thread_id
from agentloop.loop.cell import Cell


def test_progress_shows_stage_resumed_count_and_the_file_waited_for(caplog):
    console = Console(record=True, width=200, force_terminal=False)
    cell = Cell(style="refine", mode="bi-aware", provider="exchange:answers")
    ctx = SimpleNamespace(cell=cell, task=SimpleNamespace(name="rms_norm"))
    key = thread_id(cell, "rms_norm")
    with caplog.at_level(logging.INFO, logger="agentloop"):
        with LoopProgress(console, total=4, done=1) as progress:
            progress.start(key, 3, done=2)
            row = progress.progress.tasks[-1]
            assert row.completed == 2 and "resumed at #2" in row.description
            progress.stage(ctx, "dynamic")
            assert row.description.endswith("resumed at #2; dynamic")
            progress.waiting(Path("answers/3.response.json"), {"cell": cell.id, "task": "rms_norm",
                                                              "role": "coder"})
            assert "waiting for answers/3.response.json" in row.description
            assert progress.progress.tasks[0].completed == 1  # finished loops count from the start
    output = console.export_text()
    assert f"{key} (coder) waits for an answer in answers/3.response.json" in output
    assert "-:--:--" in output or "0:00:00" in output  # the ETA column
    assert f"{key}: dynamic" in caplog.text
