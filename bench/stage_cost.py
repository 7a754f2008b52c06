"""What a fresh runner costs a stage, and what parked runners save. For each task, its first
batch-invariant corpus candidate goes through compile, dynamic, correctness and benchmark in a
one-worker pool, four times:

  new     each stage in a fresh runner: as many other candidates' compile stages run in
          between as the worker holds runners (agentloop.evaluation.pool.HELD_RUNNERS), which evicts its
          parked runner; the candidate never evaluated before, so nothing of it is in the pool's
          kernel store (gates.judge.kernel_cache)
  again   fresh runners again, its compiled kernels now in the store
  parked  one other candidate between its stages: its runner is parked and resumed, as with
          several loops in flight
  held    the stages one after another in the runner that holds it

Per stage: the seconds the stage ran in the judge worker and the seconds the caller waited
(which adds waiting for a booting runner). new - held is what a fresh runner costs; new - again
is what the kernel store saves. On the H200 the campaign's stages took about three times as
long with the trust boundary as before it (docs/lab/gpu/boundary/README.md); this shows where.

    python bench/stage_cost.py --device cuda --tasks rms_norm,log_softmax --json out/stage_cost.json
    TRITON_INTERPRET=1 python bench/stage_cost.py --tasks rms_norm          # CPU (no JIT to keep)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentloop.evaluation.pool import WorkerPool  # noqa: E402
from agentloop.evaluation.stages import EvalSettings  # noqa: E402
from gates.contract import get_task  # noqa: E402
from gates.corpus import load_manifest  # noqa: E402

STAGES = ("compile", "dynamic", "correctness", "benchmark")
PASSES = ("new", "again", "parked", "held")


def between(held: int) -> dict[str, int]:
    """Pass -> other candidates' compile stages between two of its stages, for a worker that
    holds `held` runners."""
    return {"new": held, "again": held, "parked": 1, "held": 0}


def corpus(task, n: int) -> tuple[str, list[str]]:
    """The task's first batch-invariant corpus candidate, and `n` other candidates that compile
    (any label but broken), as code."""
    entries = load_manifest(task).candidates
    main = next((e.file for e in entries if e.measured_gpu_label == "invariant"), None)
    others = [e.file for e in entries if e.file != main and e.measured_gpu_label != "broken"][:n]
    read = lambda f: (task.candidates_dir / f).read_text()  # noqa: E731
    return (read(main) if main else ""), [read(f) for f in others]


def run_pass(pool: WorkerPool, task, code: str, others: list[str], settings: EvalSettings,
             between: int) -> list[dict]:
    rows = []
    for stage in STAGES:
        for other in others[:between]:  # other candidates take the worker's runners
            pool.evaluate_stage(other, task, "compile", settings)
        t0 = time.perf_counter()
        outcome = pool.evaluate_stage(code, task, stage, settings)
        waited = time.perf_counter() - t0
        rows.append({"stage": stage, "in_stage_s": round(outcome.seconds, 3), "waited_s": round(waited, 3),
                     "passed": outcome.passed, "error": outcome.error})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--tasks", default="rms_norm", help="comma-separated task names")
    ap.add_argument("--json", type=Path, help="write the rows here")
    args = ap.parse_args(argv)
    settings = EvalSettings(device=args.device)
    report: dict[str, dict] = {}
    with WorkerPool(args.device, workers=1) as pool:
        pool.warm_up()
        for name in args.tasks.split(","):
            task = get_task(name.strip())
            n = pool.held_runners
            code, others = corpus(task, n)
            if not code or len(others) < n:
                print(f"{task.name}: needs a batch-invariant corpus candidate and {n} others; skipped")
                continue
            for other in others:  # the others' kernels, built once
                pool.evaluate_stage(other, task, "compile", settings)
            passes = {p: run_pass(pool, task, code, others, settings, k) for p, k in between(n).items()}
            report[task.name] = passes
            print(f"\n{task.name} ({args.device}): seconds in the stage / waited by the caller")
            print(f"{'stage':<12}" + "".join(f"{p:>16}" for p in PASSES))
            for i, stage in enumerate(STAGES):
                cells = "".join(f"{passes[p][i]['in_stage_s']:>8.2f}/{passes[p][i]['waited_s']:<7.2f}"
                                for p in PASSES)
                print(f"{stage:<12}{cells}")
            failed = [r for p in PASSES for r in passes[p] if r["error"]]
            if failed:
                print(f"note: {failed[0]['stage']} failed: {str(failed[0]['error'])[:160]}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"device": args.device, "tasks": report}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
