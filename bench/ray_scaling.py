"""The Ray back-end's cost and its reach: measures, on this machine, what one evaluation costs
through Ray against the local worker pool, then simulates a campaign's wall time on 1-64 GPUs
from stage times and LLM latencies, and writes both to docs/scaling.md.

    TRITON_INTERPRET=1 python bench/ray_scaling.py                 # CPU: measure, simulate, write
    python bench/ray_scaling.py --device cuda --write docs/scaling.md

Overhead: the same stages of the same corpus kernels go through `WorkerPool(device, 2)` and
`RayPool(device, "local", actors=2)`, two callers at a time. For every stage, the time the caller
waited minus the time the stage ran inside its judge worker (`StageOutcome.seconds`) is what the
back-end added (queueing to a free slot included, the same for both); its mean per stage, and the
whole wall time of each back-end, are compared.

Scaling model (discrete events, `simulate`): L loops of K candidates; a candidate is one LLM call
(no GPU) and then its worker stages one after another, each on one slot (one GPU: a benchmark runs
alone on its GPU, and one actor per GPU runs one stage at a time); 2 x GPUs loops in flight, the
others queued; stage times drawn from the measured ones (per stage), LLM latency drawn from
`--llm-s` (median, log-normal spread), plus the measured per-stage overhead of Ray.
"""

from __future__ import annotations

import argparse
import heapq
import math
import os
import random
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

STAGES = ("compile", "dynamic", "correctness", "benchmark")
KERNELS = ("row_per_program", "row_tiles", "int64_offsets")
GPUS = (1, 2, 4, 8, 16, 32, 64)


def measure(pool, device: str, repeats: int) -> dict:
    """Every stage of every kernel through `pool`, two callers at a time."""
    from agentloop.evaluation.stages import EvalSettings
    from gates.contract import get_task

    task = get_task("rms_norm")
    settings = EvalSettings(device=device)
    jobs = [(k, (ROOT / "tasks/rms_norm/candidates" / f"{k}.py").read_text() + f"\n# run {r}\n")
            for r in range(repeats) for k in KERNELS]
    rows: list[dict] = []
    lock = threading.Lock()

    def one(code: str) -> None:
        for stage in STAGES:
            start = time.perf_counter()
            outcome = pool.evaluate_stage(code, task, stage, settings)
            waited = time.perf_counter() - start
            with lock:
                rows.append({"stage": stage, "waited": waited, "inside": outcome.seconds})

    start = time.perf_counter()
    threads = [threading.Thread(target=lambda part=jobs[i::2]: [one(c) for _, c in part]) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    added = [r["waited"] - r["inside"] for r in rows]
    return {"wall": wall, "stages": len(rows), "added_mean": statistics.mean(added),
            "inside_mean": statistics.mean(r["inside"] for r in rows),
            "by_stage": {s: [r["inside"] for r in rows if r["stage"] == s] for s in STAGES}}


def simulate(gpus: int, stage_times: dict[str, list[float]], llm_s: float, loops: int, candidates: int,
             overhead_s: float, seed: int = 0, spread: float = 0.5) -> float:
    """Campaign wall time (s) on `gpus` slots under the model in the module docstring."""
    rng = random.Random(seed)
    in_flight = 2 * gpus
    events: list[tuple[float, int, int, int]] = []  # (time, loop, candidate, next stage index or -1 LLM)
    free = gpus
    queue: list[tuple[float, int, int, int]] = []  # waiting for a slot: (since, loop, cand, stage)
    started = 0
    now = 0.0

    def llm() -> float:
        return llm_s * math.exp(rng.gauss(0, spread)) if llm_s > 0 else 0.0

    for _ in range(min(in_flight, loops)):
        heapq.heappush(events, (llm(), started, 0, 0))
        started += 1
    done = 0
    seq = 0
    while events:
        now, loop, cand, stage = heapq.heappop(events)
        if stage < 0:  # a stage finished: free its slot, hand it to the longest waiting
            free += 1
            stage = -stage - 1
            if stage + 1 < len(STAGES):
                queue.append((now, loop, cand, stage + 1))
            elif cand + 1 < candidates:
                heapq.heappush(events, (now + llm(), loop, cand + 1, 0))
            else:
                done += 1
                if started < loops:
                    heapq.heappush(events, (now + llm(), started, 0, 0))
                    started += 1
        else:
            queue.append((now, loop, cand, stage))
        queue.sort()
        while free and queue:
            _, lp, cd, st = queue.pop(0)
            free -= 1
            seq += 1
            took = rng.choice(stage_times[STAGES[st]]) + overhead_s
            heapq.heappush(events, (now + took, lp, cd, -st - 1))
    return now


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--repeats", type=int, default=2, help="times each kernel is evaluated (fresh code)")
    parser.add_argument("--llm-s", type=float, nargs="*", default=[0.0, 10.0, 30.0],
                        help="median LLM latencies to simulate (s per call)")
    parser.add_argument("--loops", type=int, default=78, help="loops of the simulated campaign (full: 78)")
    parser.add_argument("--candidates", type=int, default=3)
    parser.add_argument("--write", type=Path, default=None, help="write the markdown page here")
    args = parser.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

    from agentloop.evaluation.cluster.ray_pool import RayPool
    from agentloop.evaluation.pool import WorkerPool

    with WorkerPool(args.device, 2) as pool:
        pool.warm_up()
        local = measure(pool, args.device, args.repeats)
    with RayPool(args.device, "local", actors=2) as pool:
        ray = measure(pool, args.device, args.repeats)
    added = ray["added_mean"] - local["added_mean"]
    per_eval = added / local["inside_mean"]
    wall_ratio = ray["wall"] / local["wall"] - 1
    lines = [f"measured on {args.device}: {local['stages']} stages each back-end, 2 slots",
             f"local pool: wall {local['wall']:.1f} s, mean stage inside a worker "
             f"{local['inside_mean']:.2f} s, "
             f"added per stage {local['added_mean'] * 1000:.0f} ms",
             f"ray (local cluster, 2 actors): wall {ray['wall']:.1f} s, mean stage inside "
             f"{ray['inside_mean']:.2f} s, "
             f"added per stage {ray['added_mean'] * 1000:.0f} ms",
             f"Ray's overhead per evaluation: {added * 1000:+.0f} ms per stage = {per_eval:+.1%} of a mean "
             f"stage; whole wall time {wall_ratio:+.1%}"]
    print("\n".join(lines))
    stage_times = {s: local["by_stage"][s] + ray["by_stage"][s] for s in STAGES}
    table = []
    for llm_s in args.llm_s:
        base = None
        for g in GPUS:
            wall = statistics.median(simulate(g, stage_times, llm_s, args.loops, args.candidates,
                                              max(0.0, added), seed=s) for s in range(5))
            base = base or wall
            table.append((llm_s, g, wall, base / wall, base / wall / g))
            print(f"llm {llm_s:5.1f} s  gpus {g:3d}  wall {wall:8.1f} s  speedup {base / wall:5.2f}  "
                  f"efficiency {base / wall / g:.0%}")
    if args.write:
        write_page(args, lines, local, ray, table)


def write_page(args, lines, local, ray, table) -> None:
    stage_means = ", ".join(f"{s} {statistics.mean(local['by_stage'][s] + ray['by_stage'][s]):.2f} s"
                            for s in STAGES)
    rows = "\n".join(f"| {llm:g} | {g} | {wall:.0f} | {sp:.1f}x | {eff:.0%} |"
                     for llm, g, wall, sp, eff in table)
    text = f"""# Scaling the evaluation across GPUs (Ray back-end)

Written by `bench/ray_scaling.py --write docs/scaling.md` (device {args.device}). Chronicle of a
measurement, not a promise: rerun it on the machine you care about.

## What Ray adds to one evaluation

{chr(10).join('- ' + line for line in lines)}

The same stages (compile, dynamic, correctness, benchmark) of the same corpus kernels
({', '.join(KERNELS)} of rms_norm, each {args.repeats}x with fresh code so nothing is cached)
went through the local worker pool and through a Ray cluster on this machine (2 actors, one judge
worker each). "Added per stage" is the time a caller waited minus the time the stage ran inside
its judge worker: task submission, the round trip to the actor, queueing for a free slot (the
same for both back-ends). The goal of issue 14 is at most 10% per evaluation on the CPU demo.

## Simulated campaign wall time, 1-64 GPUs

{args.loops} loops x {args.candidates} candidates (the full suite: 13 tasks x 3 styles x 2 modes),
stage times drawn from the {len(local['by_stage']['compile']) * 2} measurements per stage above
({stage_means}), Ray's added time per stage included, median of 5 seeds.

| LLM latency (median s per call) | GPUs | wall (s) | speedup over 1 GPU | efficiency |
| ---: | ---: | ---: | ---: | ---: |
{rows}

### The model

- A loop is K candidates in a row; a candidate is one LLM call (no GPU; its latency drawn
  log-normally around the median, sigma 0.5), then its four worker stages one after another, each
  on one slot. The static gate reads source in the driver and costs nothing here; the evaluation
  cache is ignored (a real run is faster where cells share kernels).
- One slot per GPU: one actor per GPU, one stage at a time, so a benchmark runs alone on its GPU.
- 2 x GPUs loops in flight (the runner's default), the rest queued; a free slot goes to the stage
  that has waited longest.
- Ignored: node start-up, actors lost and replaced, the driver's own CPU (LLM calls and sqlite
  writes are cheap next to a stage), stragglers beyond the drawn stage times.

How to read it: with LLM calls short against stages, wall time falls almost as 1/GPUs until the
number of loops in flight (2 x GPUs) exceeds the loops there are ({args.loops}): from 64 GPUs on,
a 78-loop campaign cannot use them all, and the longest loop (K LLM calls and 4K stages in a row)
bounds the wall time. With slow LLM calls each loop spends most of its time waiting for the model,
so two loops per slot no longer keep the slots busy: raise `parallel:` (loops in flight) in the
campaign file to keep GPUs busy while loops wait for the model.
"""
    args.write.write_text(text)
    print(f"wrote {args.write}")


if __name__ == "__main__":
    main()
