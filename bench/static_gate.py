"""Latency of the static gate per candidate over the whole corpus.

Usage: python bench/static_gate.py [--repeat 5]

Each candidate is analysed `--repeat` times after one warm-up pass over the corpus; its latency is
the median of those runs. Prints the median and p95 over candidates, in wall-clock time and in
CPU time of this process (the latter is what to compare on a machine shared with other work).
Targets: median <= 20 ms, p95 <= 100 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from gates.contract import load_suite
from gates.corpus import load_manifest, manifest_path
from gates.static import static_gate


def corpus() -> list[tuple[str, str, object]]:
    """(label, source, task) for every candidate in every manifest of the suite."""
    out = []
    for task in load_suite().values():
        if not manifest_path(task).is_file():
            continue
        for entry in load_manifest(task).candidates:
            path = task.candidates_dir / entry.file
            out.append((f"{task.name}/{entry.file}", path.read_text(), task))
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per candidate (median kept)")
    args = parser.parse_args()
    items = corpus()
    for name, source, task in items:  # warm-up: imports, caches, the task's reference module
        static_gate(source, task, name)
    wall, cpu = [], []
    slowest = ("", 0.0)
    for name, source, task in items:
        w, c = [], []
        for _ in range(args.repeat):
            t0, p0 = time.perf_counter(), time.process_time()
            static_gate(source, task, name)
            w.append(time.perf_counter() - t0)
            c.append(time.process_time() - p0)
        wall.append(statistics.median(w) * 1000)
        cpu.append(statistics.median(c) * 1000)
        if wall[-1] > slowest[1]:
            slowest = (name, wall[-1])
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"static gate over {len(items)} corpus candidates ({args.repeat} runs each, median kept; "
          f"load average {load:.1f} on {os.cpu_count()} cores)")
    print(f"  wall: median {statistics.median(wall):6.1f} ms   p95 {percentile(wall, 0.95):6.1f} ms   "
          f"max {max(wall):6.1f} ms ({slowest[0]})")
    print(f"  cpu:  median {statistics.median(cpu):6.1f} ms   p95 {percentile(cpu, 0.95):6.1f} ms")
    print("  targets: median <= 20 ms, p95 <= 100 ms")


if __name__ == "__main__":
    main()
