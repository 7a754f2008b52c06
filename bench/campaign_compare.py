"""Compare two campaign runs' stage times: the trust boundary's cost on the GPU (#12).

`rows` turns a run's results.sqlite into rows of docs/lab/gpu/boundary/campaign_time_stages.csv
(one per gate result: run, cell, task, kernel, stage, seconds, seconds since the run's first
record); `compare` reads two runs from that file and prints, over the kernels both evaluated
(the first record of each kernel and stage): each stage's time before and after, the ratio and
the median extra for small and large tasks, the tasks that gained most, and how long a kernel
met for the first time waited for a worker (the time from its loop's previous record to its
own, less its own stages).

    python3 bench/campaign_compare.py rows full_70a2250 out/local/results.sqlite \\
        >> docs/lab/gpu/boundary/campaign_time_stages.csv
    python3 bench/campaign_compare.py compare docs/lab/gpu/boundary/campaign_time_stages.csv \\
        old_c127915_s8 full_70a2250
    python3 bench/campaign_compare.py verdicts OLD.sqlite NEW.sqlite   # verdicts that differ
    python3 bench/campaign_compare.py labels NEW.sqlite   # the corpus files it judged vs their labels
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sqlite3
import statistics
import sys
from collections import defaultdict

STAGES = ("compile", "dynamic", "correctness", "benchmark")
SMALL = {"rms_norm", "layer_norm", "silu_and_mul", "rotary_embedding", "per_token_quant_int8",
         "fused_add_rms_norm"}
"""Tasks whose inputs are small; the others (vocabulary-sized, attention, MoE, linear) move
hundreds of MB to GB per call."""
FIELDS = ("run", "cell", "task", "kernel", "stage", "seconds", "recorded_at_s")


def rows(run: str, database: str) -> None:
    db = sqlite3.connect(database)
    found = db.execute("SELECT c.cell, c.task, c.hash, g.gate, g.seconds, c.created_at FROM gate_results g "
                       "JOIN candidates c ON c.id = g.candidate_id ORDER BY c.created_at, c.id").fetchall()
    if not found:
        sys.exit(f"{database}: no gate results")
    first = found[0][5]
    out = csv.writer(sys.stdout, lineterminator="\n")
    for cell, task, digest, gate, seconds, created in found:
        out.writerow([run, cell, task, digest[:12], gate, f"{seconds:.3f}", f"{created - first:.1f}"])


def _load(path: str, run: str) -> list[dict]:
    with open(path) as f:
        found = [r for r in csv.DictReader(f) if r["run"] == run]
    if not found:
        sys.exit(f"{path}: no rows of run {run!r}")
    return found


def _first_stages(found: list[dict]) -> dict[tuple[str, str, str], float]:
    out: dict[tuple[str, str, str], float] = {}
    for r in found:
        out.setdefault((r["task"], r["kernel"], r["stage"]), float(r["seconds"]))
    return out


def _waits(found: list[dict]) -> list[float]:
    """For each kernel met for the first time after its loop's first record: the time since that
    loop's previous record less its own stages."""
    records: dict[tuple, float] = defaultdict(float)
    for r in found:
        records[(float(r["recorded_at_s"]), r["cell"], r["task"], r["kernel"])] += float(r["seconds"])
    seen, last, waits = set(), {}, []
    for (at, cell, task, kernel), stages in sorted(records.items()):
        if (cell, task) in last and kernel not in seen:
            waits.append(at - last[(cell, task)] - stages)
        seen.add(kernel)
        last[(cell, task)] = at
    return waits


def compare(path: str, before: str, after: str) -> None:
    old, new = _first_stages(_load(path, before)), _first_stages(_load(path, after))
    shared = [k for k in old if k in new and k[2] in STAGES]
    print(f"{before} -> {after}: {len(shared)} kernel-stage pairs both evaluated\n")
    print("| stage | kernels | before | after | ratio | median extra, small tasks | median extra, large |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    total = [0.0, 0.0]
    for stage in STAGES:
        keys = [k for k in shared if k[2] == stage]
        if not keys:
            continue
        a, b = sum(old[k] for k in keys), sum(new[k] for k in keys)
        total[0], total[1] = total[0] + a, total[1] + b
        medians = []
        for small in (True, False):
            extra = [new[k] - old[k] for k in keys if (k[0] in SMALL) == small]
            medians.append(f"{statistics.median(extra):+.2f} s" if extra else "-")
        small, large = medians
        print(f"| {stage} | {len(keys)} | {a:.1f} s | {b:.1f} s | {b / a:.2f} | {small} | {large} |")
    print(f"| all | {len(shared)} | {total[0]:.1f} s | {total[1]:.1f} s | {total[1] / total[0]:.2f} | | |\n")
    by_task: dict[str, float] = defaultdict(float)
    for k in shared:
        by_task[k[0]] += new[k] - old[k]
    print("extra by task: " + ", ".join(f"{t} {v:+.0f} s" for t, v in
                                        sorted(by_task.items(), key=lambda kv: -kv[1])))
    for run in (before, after):
        waits = _waits(_load(path, run))
        if waits:
            print(f"{run}: a new kernel waited for a worker {statistics.median(waits):.1f} s (median of "
                  f"{len(waits)})")


def _verdicts(database: str) -> dict[tuple[str, str, str], list[tuple[bool, str]]]:
    """(task, kernel, gate) -> every (passed, why) the run recorded for it; `why` begins with
    "memory: " where the error or a finding names running out of memory."""
    db = sqlite3.connect(database)
    found: dict[tuple[str, str, str], list[tuple[bool, str]]] = defaultdict(list)
    for task, digest, gate, passed, findings, error in db.execute(
            "SELECT c.task, c.hash, g.gate, g.passed, g.findings, g.error FROM gate_results g JOIN "
            "candidates c ON c.id = g.candidate_id WHERE g.gate IN ('compile', 'dynamic', 'correctness')"):
        errors = [f for f in json.loads(findings or "[]") if f.get("severity") == "error"]
        why = (error or "").split(";")[0][:90] or ", ".join(sorted({f.get("rule", "?") for f in errors}))
        said = " ".join([error or "", *(f.get("message", "") for f in errors)])
        if "OutOfMemoryError" in said or "out of memory" in said:
            why = f"memory: {why}"
        found[(task, digest[:12], gate)].append((bool(passed), why))
    return found


def verdicts(databases: list[str]) -> None:
    """The kernel-gates whose verdicts differ between runs of the same code (same kernel hash),
    with why each failing run failed; then each run's failures that name running out of memory."""
    runs = {path: _verdicts(path) for path in databases}
    keys = sorted(set().union(*runs.values()))
    print("| task | kernel | gate | " + " | ".join(os.path.basename(p) for p in databases) + " |")
    print("| --- | --- | --- |" + " --- |" * len(databases))
    differ = 0
    for key in keys:
        seen = [runs[p].get(key) for p in databases]
        outcomes = {passed for got in seen if got for passed, _ in got}
        if len(outcomes) < 2:
            continue
        differ += 1
        cells = ["-" if not got else "; ".join("pass" if ok else f"FAIL ({why})" for ok, why in got[:2])
                 for got in seen]
        print(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(cells) + " |")
    print(f"\n{differ} of {len(keys)} kernel-gates had different verdicts")
    for path in databases:
        memory = sum(1 for got in runs[path].values() for ok, why in got
                     if not ok and why.startswith("memory: "))
        print(f"{path}: {memory} failures for memory")


def _corpus() -> dict[tuple[str, str], tuple[str, str]]:
    """(task, code with trailing blanks stripped) -> (file, measured GPU label) over every
    task's corpus."""
    from gates.contract import load_suite
    from gates.corpus import load_manifest

    found = {}
    for task in load_suite().values():
        if not task.candidates_dir.is_dir():
            continue
        for entry in load_manifest(task).candidates:
            code = _plain((task.candidates_dir / entry.file).read_text())
            found[(task.name, code)] = (entry.file, entry.measured_gpu_label)
    return found


def _plain(code: str) -> str:
    return "\n".join(line.rstrip() for line in code.strip().splitlines())


def labels(databases: list[str]) -> None:
    """Each run's verdicts on the corpus files it judged (matched by code) against their
    measured GPU labels: an invariant file must pass every gate it met (the static gate too),
    the dynamic and correctness gates among them; a variant one fail the static or dynamic
    gate; a broken one fail a gate that runs it."""
    corpus = _corpus()
    wanted = {"invariant": lambda failed, ran: not failed and {"dynamic", "correctness"} <= ran,
              "variant": lambda failed, ran: bool(failed & {"static", "dynamic"}),
              "broken": lambda failed, ran: bool(failed - {"static"})}
    for path in databases:
        got: dict[tuple[str, str], dict[str, set[bool]]] = defaultdict(lambda: defaultdict(set))
        for task, code, gate, passed in sqlite3.connect(path).execute(
                "SELECT c.task, c.code, g.gate, g.passed FROM gate_results g JOIN candidates c "
                "ON c.id = g.candidate_id WHERE c.code IS NOT NULL AND "
                "g.gate IN ('compile', 'static', 'dynamic', 'correctness')"):
            key = (task, _plain(code))
            if key in corpus:
                got[key][gate].add(bool(passed))
        agree = 0
        for key, gates in sorted(got.items()):
            name, label = corpus[key]
            failed = {gate for gate, seen in gates.items() if False in seen}
            if wanted[label](failed, set(gates)):
                agree += 1
                continue
            judged = (f"failed {', '.join(sorted(failed))}" if failed else
                      "passed " + ", ".join(sorted(gates)))
            print(f"  {key[0]}/{name}: labelled {label}, {judged}")
        print(f"{path}: {agree} of {len(got)} corpus files judged as labelled on the GPU")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("rows", help="a run's results.sqlite as CSV rows (no header)")
    r.add_argument("run")
    r.add_argument("database")
    c = sub.add_parser("compare", help="two runs of the CSV, stage by stage")
    c.add_argument("csv")
    c.add_argument("before")
    c.add_argument("after")
    v = sub.add_parser("verdicts", help="kernel-gates whose verdicts differ between runs' databases")
    v.add_argument("databases", nargs="+")
    lab = sub.add_parser("labels", help="corpus files a run judged, against their GPU labels")
    lab.add_argument("databases", nargs="+")
    args = parser.parse_args()
    for path in getattr(args, "databases", None) or [getattr(args, "database", None) or args.csv]:
        if not os.path.isfile(path):  # sqlite3 would make an empty database of it
            parser.error(f"{path}: no such file")
    if args.command == "rows":
        rows(args.run, args.database)
    elif args.command == "labels":
        labels(args.databases)
    elif args.command == "verdicts":
        verdicts(args.databases)
    else:
        compare(args.csv, args.before, args.after)


if __name__ == "__main__":
    main()
