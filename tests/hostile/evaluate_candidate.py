"""Run one candidate file through the loop's evaluation path and print the outcomes as JSON.

test_hostile.py starts this script in a subprocess for the "evaluate" cases (candidates that
cheat only in the benchmark): `agentloop.evaluation.pool.WorkerPool(...).evaluate(code, task, settings,
stages=[...])`, the same call the optimisation loop makes. Exit status 0 when every stage
passed, 1 otherwise; stdout is one JSON list of StageOutcome dumps.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("candidate")
    parser.add_argument("--task", required=True)
    parser.add_argument("--stages", default="compile,benchmark")
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    from agentloop.evaluation.pool import WorkerPool
    from agentloop.evaluation.stages import EvalSettings
    from gates.contract import get_task

    task = get_task(args.task)
    code = Path(args.candidate).read_text()
    stages = [s for s in args.stages.split(",") if s]
    settings = EvalSettings(device=args.device, stage_timeout_s={s: args.timeout for s in
                                             ("compile", "static", "dynamic", "correctness", "benchmark")})
    with WorkerPool(args.device, workers=1) as pool:
        outcomes = pool.evaluate(code, task, settings, stages=stages)
    print(json.dumps([o.model_dump(mode="json") for o in outcomes]))
    return 0 if outcomes and all(o.passed for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
