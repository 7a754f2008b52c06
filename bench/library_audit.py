"""Audit installed Triton kernel libraries in place: `agentloop audit --entry` on each op that
maps onto a task, through the adapters in `bench/library_adapters/<library>/<task>.py`.

    python bench/library_audit.py --device cuda --json OUT.json [--jobs 6] [--budget 450]
    python bench/library_audit.py --from-json OUT.json --write     # render docs/library_audit.md

The libraries are pure wheels from the package registry (bench/gpu_wheels.sh fetches them with
--no-deps into .whl/); they must be importable from PYTHONPATH. Each audit is one `agentloop
audit --entry MODULE:FUNCTION --adapter FILE --task TASK --json` process, `--jobs` at a time:
the library code runs only in the audit's caged runner, never here. The JSON file is rewritten
after every audit, so a run cut short keeps what finished; no audit starts after `--budget`
seconds. Exit status 2 of an audit (the module does not import, the adapter is unusable) is
recorded with its one-line message.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ADAPTERS = REPO / "bench" / "library_adapters"
DOC = REPO / "docs" / "library_audit.md"


@dataclass(frozen=True)
class Audit:
    """One library op audited as one task."""

    library: str
    """The import package (its distribution's version is recorded)."""
    task: str
    entry: str
    """package.module:function, the callable the adapter calls."""
    adapter: str
    """Path of the adapter file, relative to the repository."""


def _audit(library: str, task: str, entry: str) -> Audit:
    return Audit(library, task, entry, f"bench/library_adapters/{library}/{task}.py")


LIBRARIES = {"liger_kernel": "liger-kernel", "flag_gems": "flag-gems", "fla": "fla-core"}
"""Import package -> distribution (for its version)."""
AUDITS = [  # the slowest first (autotuned GEMM, vocabulary-wide rows), so the budget cuts short ones
    _audit("flag_gems", "linear", "flag_gems.ops.addmm:addmm"),
    _audit("flag_gems", "log_softmax", "flag_gems.ops.log_softmax:log_softmax"),
    _audit("flag_gems", "greedy_sample", "flag_gems.ops.argmax:argmax"),
    _audit("liger_kernel", "softmax", "liger_kernel.ops.softmax:LigerSoftmaxFunction.apply"),
    _audit("flag_gems", "softmax", "flag_gems.ops.softmax:softmax"),
    _audit("fla", "softmax", "fla.ops.utils.softmax:softmax_fwd"),
    _audit("liger_kernel", "rms_norm", "liger_kernel.ops.rms_norm:LigerRMSNormFunction.apply"),
    _audit("flag_gems", "rms_norm", "flag_gems.ops.rms_norm:rms_norm"),
    _audit("fla", "rms_norm", "fla.modules.norm.layernorm:rms_norm"),
    _audit("liger_kernel", "fused_add_rms_norm",
           "liger_kernel.ops.fused_add_rms_norm:LigerFusedAddRMSNormFunction.apply"),
    _audit("flag_gems", "fused_add_rms_norm", "flag_gems.fused.fused_add_rms_norm:fused_add_rms_norm"),
    _audit("fla", "fused_add_rms_norm", "fla.modules.norm.layernorm:rms_norm"),
    _audit("liger_kernel", "layer_norm", "liger_kernel.ops.layer_norm:LigerLayerNormFunction.apply"),
    _audit("flag_gems", "layer_norm", "flag_gems.ops.layernorm:layer_norm"),
    _audit("fla", "layer_norm", "fla.modules.norm.layernorm:layer_norm"),
    _audit("liger_kernel", "silu_and_mul", "liger_kernel.ops.swiglu:LigerSiLUMulFunction.apply"),
    _audit("flag_gems", "silu_and_mul", "flag_gems.fused.silu_and_mul:silu_and_mul"),
    _audit("fla", "silu_and_mul", "fla.modules.activations.ops:swiglu"),
    _audit("liger_kernel", "rotary_embedding", "liger_kernel.ops.rope:LigerRopeFunction.apply"),
    _audit("flag_gems", "rotary_embedding", "flag_gems.fused.rotary_embedding:apply_rotary_pos_emb"),
    _audit("flag_gems", "moe_topk_softmax", "flag_gems.fused.topk_softmax:topk_softmax"),
]


def versions() -> dict[str, str]:
    """Each library's installed version, read from its metadata (nothing is imported)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for package, dist in LIBRARIES.items():
        try:
            out[package] = version(dist)
        except PackageNotFoundError:
            out[package] = "not installed"
    return out


GATES: list[str] = []
"""Gates to run (`--gate`); empty: all."""


def audit_command(audit: Audit, device: str, timeout: float) -> list[str]:
    return [sys.executable, "-m", "agentloop", "audit", "--entry", audit.entry, "--adapter",
            str(REPO / audit.adapter), "--task", audit.task, "--device", device, "--json",
            "--timeout", f"{timeout:g}", *(x for g in GATES for x in ("--gate", g))]


def run_one(audit: Audit, device: str, timeout: float, env: dict[str, str]) -> dict:
    """One audit in its own `agentloop audit` process: its verdict JSON, or why there is none."""
    start = time.perf_counter()
    row: dict = {**asdict(audit), "exit": None, "seconds": 0.0, "verdict": None, "error": None}
    try:
        proc = subprocess.run(audit_command(audit, device, timeout), cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=4 * timeout + 120)
    except subprocess.TimeoutExpired:
        row.update(seconds=round(time.perf_counter() - start, 1), error="the audit process timed out")
        return row
    row.update(exit=proc.returncode, seconds=round(time.perf_counter() - start, 1))
    if proc.returncode in (0, 1):
        try:
            row["verdict"] = json.loads(proc.stdout)
        except json.JSONDecodeError:
            row["error"] = f"no JSON verdict: {proc.stdout[-300:]}"
    else:
        lines = [ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
        row["error"] = lines[-1].removeprefix("error: ").strip()[:500] if lines else f"exit {proc.returncode}"
    return row


def run_audits(audits: list[Audit], device: str, json_path: Path, *, jobs: int, budget: float,
               timeout: float) -> dict:
    """Run the audits `jobs` at a time, writing `json_path` after each; none starts after
    `budget` seconds."""
    import torch
    import triton

    started = time.monotonic()
    gpu = torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "CPU"
    data = {"device": device, "gpu": gpu,
            "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "libraries": versions(),
            "command": "python bench/library_audit.py " + shlex.join(sys.argv[1:]), "audits": []}
    lock = threading.Lock()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([env.get("PYTHONPATH", ""), str(REPO)]).strip(os.pathsep)

    def one(audit: Audit) -> None:
        if time.monotonic() - started > budget:
            row = {**asdict(audit), "exit": None, "seconds": 0.0, "verdict": None,
                   "error": f"not run: the {budget:g} s budget was spent"}
        else:
            row = run_one(audit, device, timeout, env)
        with lock:
            data["audits"].append(row)
            data["audits"].sort(key=lambda r: (r["task"], r["library"]))
            json_path.write_text(json.dumps(data, indent=1))
            print(f"{audit.library:<13} {audit.task:<19} {summary(row)} ({row['seconds']:.0f} s)", flush=True)

    json_path.parent.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(one, audits))
    return data


# Rendering -------------------------------------------------------------------------------
def merge(runs: list[dict]) -> dict:
    """Several runs as one: the first run's header, every run's command, and for each (library,
    task) the row of the last run that ran it (a row cut by the budget never replaces one)."""
    out = {**runs[0], "command": " ; ".join(dict.fromkeys(r["command"] for r in runs))}
    rows: dict[tuple[str, str], dict] = {}
    for run in runs:
        for row in run["audits"]:
            key = (row["library"], row["task"])
            if key not in rows or summary(row) != "not run":
                rows[key] = row
    out["audits"] = sorted(rows.values(), key=lambda r: (r["task"], r["library"]))
    return out


def _gate(verdict: dict, name: str) -> dict | None:
    return next((g for g in verdict["gates"] if g["gate"] == name), None)


def gate_cell(verdict: dict | None, name: str) -> str:
    g = _gate(verdict, name) if verdict else None
    if g is None:
        return "—"
    if g["passed"]:
        return "pass" + (" (warnings)" if g["findings"] else "")
    return "error" if g.get("error") and not g["findings"] and not g.get("counterexample") else "FAIL"


def summary(row: dict) -> str:
    if row["verdict"] is None:
        return "unusable" if row["exit"] == 2 else "not run" if row["exit"] is None and "budget" in \
            (row["error"] or "") else "error"
    return row["verdict"]["verdict"]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ").strip()


def detail(row: dict) -> str:
    """The counterexample, else the first error finding or gate error, in one line."""
    if row["verdict"] is None:
        return _cell((row["error"] or "").removeprefix(f"--entry {row['entry']}: "))
    dynamic = _gate(row["verdict"], "dynamic")
    if dynamic and dynamic.get("counterexample"):
        cx = dynamic["counterexample"]
        where = cx.get("context", "").split(":", 1)[-1].strip()
        diff = f", max abs diff {cx['max_abs_diff']:.3g}" if cx.get("max_abs_diff") is not None else ""
        return _cell(f"output {cx['output']} row {cx['row']}: B={cx['batch_size']} position {cx['position']} "
                     f"vs B={cx['reference_batch_size']}, {cx['mismatched_elements']} elements differ{diff}; "
                     f"{where}")
    for name in ("dynamic", "correctness", "static"):
        g = _gate(row["verdict"], name)
        if g and not g["passed"]:
            first = next((f for f in g["findings"] if f["severity"] == "error"), None)
            text = f"[{first['rule']}] {first['message']}" if first else g.get("error") or ""
            return _cell(f"{name}: {text}")[:400]
    static = _gate(row["verdict"], "static")
    if static and static["findings"]:
        f = static["findings"][0]
        return _cell(f"static warning [{f['rule']}] {f['message']}")[:400]
    return ""


def render(data: dict) -> str:
    rows = data["audits"]
    libs = ", ".join(f"{LIBRARIES.get(k, k)} {v}" for k, v in data["libraries"].items())
    lines = [
        "# Library audit: installed Triton kernel libraries through the gates",
        "",
        "Generated by `bench/library_audit.py --from-json FILE --write`; do not edit.",
        "",
        "Each row is one library op audited in place as one task of the suite with",
        "`agentloop audit --entry MODULE:FUNCTION --adapter bench/library_adapters/LIB/TASK.py --task TASK`:",
        "the adapter maps the task's signature onto the library's (argument order, `normalized_shape`,",
        "outputs passed in, in-place ops given copies); the library runs caged like a candidate. The",
        "static gate reads the library module's source and the package modules it imports, following",
        "the entry through aliases and the adapter's renamed imports; a call into code without Python",
        "source is a BI000 warning (line numbers are the module's); the dynamic",
        "gate compares rows bitwise across batch contexts; correctness compares with the task's",
        "reference at its tolerances (a float32 GEMM that lets `tl.dot` use TF32 fails there: the task",
        "asks for IEEE float32 products, `fp32_matmul: ieee`).",
        "",
        f"- run: {data['date']}, {data['device']} ({data['gpu']}), torch {data['torch']}, Triton "
        f"{data['triton']}, Python {data['python']}",
        f"- libraries: {libs}",
        f"- command: `{data['command']}`",
    ]
    counts: dict[str, int] = {}
    for r in rows:
        counts[summary(r)] = counts.get(summary(r), 0) + 1
    lines += [f"- {len(rows)} ops: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())), "",
              "| task | library | entry | verdict | static | dynamic | correctness "
              "| counterexample or first finding |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        v = r["verdict"]
        gates = " | ".join(gate_cell(v, g) for g in ("static", "dynamic", "correctness"))
        cells = [r["task"], r["library"], f"`{r['entry']}`", summary(r), gates, detail(r)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Findings per op", ""]
    for r in rows:
        if r["verdict"] is None:
            continue
        found = [(g["gate"], f) for g in r["verdict"]["gates"] for f in g["findings"]]
        errors = [(g["gate"], g["error"]) for g in r["verdict"]["gates"] if g.get("error")]
        if not found and not errors:
            continue
        lines.append(f"- **{r['library']} {r['task']}** (`{r['entry']}`):")
        lines += [f"  - {gate}: could not run: {_cell(err)[:300]}" for gate, err in errors]
        for gate, f in found:
            line = f" line {f['line']}" if f.get("line") else ""
            lines.append(f"  - {gate} {f['severity']} [{f['rule']}]{line}: {_cell(f['message'])[:300]}")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--json", type=Path, help="Where to write the results (rewritten after each audit).")
    ap.add_argument("--jobs", type=int, default=6, help="Audits at once (default 6).")
    ap.add_argument("--budget", type=float, default=450.0, help="No audit starts after this many seconds.")
    ap.add_argument("--timeout", type=float, default=150.0, help="Seconds each gate may run an op.")
    ap.add_argument("--libraries", help="Comma-separated import packages to audit (default: all).")
    ap.add_argument("--tasks", help="Comma-separated tasks to audit (default: all).")
    ap.add_argument("--gate", action="append", default=[], help="Run only this gate (repeatable).")
    ap.add_argument("--from-json", type=Path, nargs="+",
                    help="Render results instead of measuring (several files: a later run's result for "
                         "the same op wins).")
    ap.add_argument("--write", action="store_true", help=f"With --from-json: write {DOC.relative_to(REPO)}.")
    args = ap.parse_args()
    if args.from_json:
        text = render(merge([json.loads(f.read_text()) for f in args.from_json]))
        if args.write:
            DOC.write_text(text)
            print(f"wrote {DOC}")
        else:
            print(text, end="")
        return
    if args.json is None:
        ap.error("--json OUT.json is required to measure")
    GATES[:] = args.gate
    audits = [a for a in AUDITS if (not args.libraries or a.library in args.libraries.split(","))
              and (not args.tasks or a.task in args.tasks.split(","))]
    run_audits(audits, args.device, args.json, jobs=args.jobs, budget=args.budget, timeout=args.timeout)


if __name__ == "__main__":
    main()
