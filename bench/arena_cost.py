"""What the arena costs a GPU stage: the dynamic and correctness gates of one batch-invariant
corpus candidate per task, run in this process as a judge worker runs them, with its runner's
inputs and outputs in device memory shared with the runner (the default on a GPU) and through
page-locked host memory (AGENTLOOP_ARENA=host). Each gate runs twice: in a fresh runner, then
in the runner that holds the candidate.

    python3 bench/arena_cost.py --tasks log_softmax,decode_attention --json out/arena_cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gates.contract import get_task  # noqa: E402
from gates.corpus import load_manifest  # noqa: E402
from gates.correctness import correctness_job  # noqa: E402
from gates.dynamic import dynamic_job  # noqa: E402
from gates.judge import runner_pool  # noqa: E402

GATES = {"dynamic": dynamic_job, "correctness": correctness_job}


def candidate(task) -> str:
    entry = next(e for e in load_manifest(task).candidates if e.measured_gpu_label == "invariant")
    return (task.candidates_dir / entry.file).read_text()


def measure(task, code: str, arena: str) -> list[dict]:
    os.environ[arena.ARENA_VARIABLE] = arena
    rows = []
    for gate, job in GATES.items():
        runner_pool.RUNNERS.close()  # a fresh runner for the first run of each gate
        for run in ("fresh", "held"):
            start = time.perf_counter()
            result = job(code, task, "cuda")
            kind = type(runner_pool.RUNNERS.current.arena).__name__ if runner_pool.RUNNERS.current else None
            rows.append({"task": task.name, "arena": arena, "gate": gate, "run": run, "arena_kind": kind,
                         "seconds": round(time.perf_counter() - start, 3), "passed": result.passed,
                         "error": result.error})
            print(json.dumps(rows[-1]), flush=True)
    runner_pool.RUNNERS.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="log_softmax")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    for name in args.tasks.split(","):
        task = get_task(name)
        code = candidate(task)
        for arena in ("host", "device"):
            rows += measure(task, code, arena)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
