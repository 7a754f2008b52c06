"""The hostile-candidate suite of issue 12: candidate files written as an attacker would, each run
through the real command line (`python -m agentloop audit ... --json`) or the loop's evaluation
path (`evaluate_candidate.py`, for candidates that cheat only in the benchmark), in a subprocess
whose environment holds fake provider keys.

One case per candidate (tests/hostile/candidates/NAME.py, expectations in expectations.yaml).
A case passes when the candidate was contained:
- the verdict is reject (exit status 1) with one of the expected rule ids among the findings (or
  named in a gate's error), or a gate error matching one of the expected patterns;
- the fake keys appear nowhere in stdout or stderr (nor in what the loopback listener received);
- stdout is exactly one JSON document (a candidate cannot forge or corrupt the report);
- no marker file exists afterwards: /tmp, the temp dir, /root, $HOME named agentloop-hostile-NAME*,
  the repository root named .hostile-NAME*;
- no process is left: none of the run's descendants (polled while it ran) and none whose cmdline
  names agentloop-hostile-NAME or whose comm is the candidate's tag, a few seconds after the end;
- the loopback listener of the case (TCP and UDP on its port) got no connection and no datagram;
- where the case says so, the audit process's peak RSS stays under a bound.
Every failed assertion is listed in the case's failure message, so one run tells which candidate
escapes which way. `HOSTILE_REPORT=path.jsonl` appends one JSON line per case (README baseline).
`AGENTLOOP_HOSTILE_REPO=DIR` and `AGENTLOOP_HOSTILE_PYTHON=PY` run the command in another checkout
with an interpreter that imports it (README.md: the baseline against an old commit).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

HERE = Path(__file__).resolve().parent
CANDIDATES = HERE / "candidates"
REPO = Path(os.environ.get("AGENTLOOP_HOSTILE_REPO") or HERE.parents[1]).resolve()
PYTHON = os.environ.get("AGENTLOOP_HOSTILE_PYTHON") or sys.executable
EXPECTATIONS: dict[str, dict] = yaml.safe_load((HERE / "expectations.yaml").read_text())
DEFAULTS = {"mode": "audit", "task": "rms_norm", "gates": ["correctness"], "rules": [], "errors": [],
            "timeout": 60, "harness_timeout": 150, "port": None, "kill_after": None, "max_rss_mb": None,
            "speedup_max": None, "settle": 5.0, "device": None, "counterexample": [], "cuda": None}
DEVICE = os.environ.get("HOSTILE_DEVICE", "cpu")
CUDA_RSS_MB = 200
"""What a CUDA torch adds to the audit process's own memory (H200 host: honest controls peak at
530-645 MB there, against about 400 MB here), added to `max_rss_mb` bounds on a GPU."""
"""Where the suite runs (`HOSTILE_DEVICE=cuda` on a GPU host); cases with `device: cuda` run
only there."""
RULE_ID = re.compile(r"\b(?:SB|AC|CR|BI)\d{3}\b")
POLL = 0.05


def comm_tag(name: str) -> str:
    """The process name (/proc/PID/comm, 15 bytes) a candidate gives processes it leaves running."""
    return ("hst-" + name)[:15]


def case(name: str) -> dict:
    """The expectation of `name`; its `cuda` keys replace the others when the suite runs on a GPU
    (where the sweep and the limits differ)."""
    spec = dict(DEFAULTS)
    spec.update(EXPECTATIONS[name] or {})
    if DEVICE == "cuda":
        spec.update(spec["cuda"] or {})
    return spec


# Processes ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    start: str
    state: str


def _stat(pid: int) -> Proc | None:
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = data[data.rindex(")") + 2:].split()
    return Proc(pid, int(rest[1]), rest[19], rest[0])


def _read(path: str, limit: int = 4096) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(limit).replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _processes() -> dict[int, Proc]:
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            p = _stat(int(entry))
            if p is not None:
                out[p.pid] = p
    return out


def _descendants(root: int, procs: dict[int, Proc]) -> list[Proc]:
    children: dict[int, list[Proc]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p)
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child.pid)
    return out


def _alive(p: Proc) -> bool:
    now = _stat(p.pid)
    return now is not None and now.start == p.start and now.state not in ("Z", "X")


def _tagged(name: str, procs: dict[int, Proc], exclude: set[int]) -> list[Proc]:
    marker, tag = f"agentloop-hostile-{name}", comm_tag(name)
    out = []
    for p in procs.values():
        if p.pid in exclude or p.state in ("Z", "X"):
            continue
        if marker in _read(f"/proc/{p.pid}/cmdline") or _read(f"/proc/{p.pid}/comm") == tag:
            out.append(p)
    return out


def _ancestors() -> set[int]:
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        p = _stat(pid)
        if p is None:
            break
        pid = p.ppid
    return pids


def _kill(procs: list[Proc]) -> None:
    for p in procs:
        if _alive(p):
            try:
                os.kill(p.pid, signal.SIGKILL)
            except OSError:
                pass


def _rss_kb(pid: int) -> int:
    for line in _read(f"/proc/{pid}/status", 1 << 16).splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def _ignores_sigterm(pid: int) -> bool:
    """Whether the process ignores SIGTERM (none of agentloop's does: a candidate made it so)."""
    for line in _read(f"/proc/{pid}/status", 1 << 16).splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    return False


# Markers -----------------------------------------------------------------------------------
def marker_dirs() -> list[Path]:
    dirs = [Path("/tmp"), Path(tempfile.gettempdir()), Path("/root"), Path.home(), REPO, HERE.parents[1]]
    out = []
    for d in dirs:
        d = d.resolve()
        if d not in out:
            out.append(d)
    return out


def markers(name: str) -> list[Path]:
    """Files or directories named for this candidate: NAME exactly, or NAME followed by - or ."""
    pattern = re.compile(rf"^(?:agentloop-hostile-|\.hostile-){re.escape(name)}(?:[-.].*)?$")
    found = []
    for d in marker_dirs():
        try:
            found += [d / n for n in os.listdir(d) if pattern.match(n)]
        except OSError:
            continue
    return found


def remove(paths: list[Path]) -> None:
    for p in paths:
        try:
            if p.is_dir() and not p.is_symlink():
                for child in p.iterdir():
                    child.unlink()
                p.rmdir()
            else:
                p.unlink()
        except OSError:
            pass


# The loopback listener ---------------------------------------------------------------------
class Listener:
    """TCP and UDP on 127.0.0.1:port; records every connection and what it received."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.events: list[str] = []
        self.data = b""
        self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self.tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.tcp.bind(("127.0.0.1", port))
            self.tcp.listen(16)
            self.udp.bind(("127.0.0.1", port))
        except OSError:
            self.tcp.close()
            self.udp.close()
            raise
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        conns: list[socket.socket] = []
        while not self._stop.is_set():
            ready, _, _ = select.select([self.tcp, self.udp, *conns], [], [], 0.1)
            for s in ready:
                try:
                    if s is self.tcp:
                        conn, addr = s.accept()
                        conn.setblocking(False)
                        conns.append(conn)
                        self.events.append(f"TCP connection from {addr[0]}:{addr[1]}")
                    elif s is self.udp:
                        chunk, addr = s.recvfrom(65536)
                        self.events.append(f"UDP datagram from {addr[0]}:{addr[1]}")
                        self.data += chunk
                    else:
                        chunk = s.recv(65536)
                        if chunk:
                            self.data += chunk[: max(0, (1 << 20) - len(self.data))]
                        else:
                            conns.remove(s)
                            s.close()
                except OSError:
                    if s in conns:
                        conns.remove(s)
        for c in conns:
            c.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.tcp.close()
        self.udp.close()


def open_listener(port: int, wait: float = 90.0) -> Listener:
    """The case's listener; waits while another test session on this machine holds the port."""
    deadline = time.monotonic() + wait
    while True:
        try:
            return Listener(port)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


# One run -----------------------------------------------------------------------------------
@dataclass
class Run:
    returncode: int | None = None
    stdout: bytes = b""
    stderr: bytes = b""
    seconds: float = 0.0
    timed_out: bool = False
    killed: bool = False
    peak_rss_kb: int = 0
    seen: dict[int, Proc] = field(default_factory=dict)
    seen_cmd: dict[int, str] = field(default_factory=dict)
    leaked_in_files: list[str] = field(default_factory=list)


def candidate_path(name: str, spec: dict) -> str:
    return str(spec.get("path") or CANDIDATES / f"{name}.py")


def command(name: str, spec: dict) -> list[str]:
    path = candidate_path(name, spec)
    if spec["mode"] == "evaluate":
        return [PYTHON, str(HERE / "evaluate_candidate.py"), path, "--task", spec["task"],
                "--timeout", str(spec["timeout"]), "--device", DEVICE]
    cmd = [PYTHON, "-m", "agentloop", "audit", path, "--task", spec["task"], "--device", DEVICE,
           "--json", "--timeout", str(spec["timeout"])]
    for gate in spec["gates"]:
        cmd += ["--gate", gate]
    return cmd


def run_candidate(name: str, spec: dict, env: dict[str, str], keys: list[str]) -> Run:
    run = Run()
    with tempfile.TemporaryDirectory(prefix="hostile-harness-") as d:
        out_path, err_path = Path(d) / "stdout", Path(d) / "stderr"
        with open(out_path, "ab") as out, open(err_path, "ab") as err:  # append: as a pipe would
            start = time.monotonic()
            proc = subprocess.Popen(command(name, spec), cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=err, start_new_session=True)
            term_sent = 0.0
            while proc.poll() is None:
                elapsed = time.monotonic() - start
                procs = _processes()
                for p in _descendants(proc.pid, procs):
                    if p.pid not in run.seen:
                        run.seen[p.pid] = p
                        run.seen_cmd[p.pid] = _read(f"/proc/{p.pid}/cmdline", 300)
                run.peak_rss_kb = max(run.peak_rss_kb, _rss_kb(proc.pid))
                if spec["kill_after"] and not term_sent:  # SIGTERM once the candidate is running
                    below = _descendants(proc.pid, procs)
                    tags = {_read(f"/proc/{p.pid}/comm") for p in below}
                    if comm_tag(name) in tags or any(_ignores_sigterm(p.pid) for p in below) \
                            or elapsed > spec["kill_after"]:
                        proc.send_signal(signal.SIGTERM)
                        run.killed, term_sent = True, elapsed
                if (term_sent and elapsed > term_sent + 10) or elapsed > spec["harness_timeout"]:
                    run.timed_out = not term_sent
                    proc.kill()
                    proc.wait()
                    break
                time.sleep(POLL)
            run.returncode = proc.wait()
            run.seconds = time.monotonic() - start
        run.stdout = _head_tail(out_path)
        run.stderr = _head_tail(err_path)
        run.leaked_in_files = [p.name for p in (out_path, err_path) if _contains_any(p, keys)]
    return run


def _head_tail(path: Path, limit: int = 1 << 20) -> bytes:
    size = path.stat().st_size
    with open(path, "rb") as f:
        if size <= 2 * limit:
            return f.read()
        head = f.read(limit)
        f.seek(size - limit)
        return head + b"\n[... %d bytes ...]\n" % (size - 2 * limit) + f.read()


def _contains_any(path: Path, needles: list[str]) -> bool:
    """Whether the file holds any of the needles (read in chunks: a flood may have reached it)."""
    keys = [k.encode() for k in needles]
    overlap = max(len(k) for k in keys)
    tail = b""
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            block = tail + chunk
            if any(k in block for k in keys):
                return True
            tail = block[-overlap:]
    return False


def fake_keys() -> dict[str, str]:
    token = secrets.token_hex(12)
    return {"OPENAI_API_KEY": f"sk-hostile-test-{token}",
            "ANTHROPIC_API_KEY": f"sk-ant-hostile-test-{token}",
            "AGENTLOOP_HOSTILE_TEST_TOKEN": f"hostile-test-token-{token}"}


def key_values(keys: dict[str, str]) -> list[str]:
    """The strings that must not appear anywhere: each key and their shared random part."""
    return list(keys.values()) + [keys["OPENAI_API_KEY"].rsplit("-", 1)[1]]


# Judging the outcome -----------------------------------------------------------------------
def outcome_problems(name: str, spec: dict, run: Run) -> tuple[list[str], str]:
    """Problems with the verdict (not rejected, wrong reason, bad output), and a short label of
    what happened ("accept", "reject: CR005", "error: ...")."""
    if run.timed_out:
        limit = spec["harness_timeout"]
        return [f"the {spec['mode']} command did not finish within {limit} s (killed)"], "hang"
    if spec["mode"] == "killed":
        return [], "killed"
    text = run.stdout.decode(errors="replace")
    try:
        data = json.loads(text)
    except ValueError:
        tail = run.stderr.decode(errors="replace").strip().splitlines()[-3:]
        return [f"stdout is not one JSON document (exit {run.returncode}): {text[:300]!r}; "
                f"stderr tail: {tail}"], "no-json"
    rules, errors, contexts = set(), [], []
    if spec["mode"] == "evaluate":
        stages = data if isinstance(data, list) else []
        _collect(stages, rules, errors)  # findings and errors wherever a stage outcome holds them
        accepted = bool(stages) and all(o.get("passed") for o in stages)
        bench = next((o.get("benchmark") for o in stages if o.get("stage") == "benchmark"), None) or {}
        speedup = bench.get("speedup")
    else:
        if not isinstance(data, dict) or data.get("candidate") != candidate_path(name, spec):
            return [f"stdout is not this candidate's verdict: {text[:300]!r}"], "forged"
        for g in data.get("gates", []):
            rules |= {f.get("rule") for f in g.get("findings") or []}
            if g.get("error"):
                errors.append(g["error"])
            if isinstance(g.get("counterexample"), dict):
                contexts.append(str(g["counterexample"].get("context", "")))
        accepted = data.get("verdict") == "accept"
        speedup = None
    for e in errors:
        rules |= set(RULE_ID.findall(e))
    label = "accept" if accepted else "reject: " + ", ".join(sorted(r for r in rules if r) or ["-"])
    if errors:
        label += f" (error: {errors[0][:120]})"
    if accepted:
        if spec["speedup_max"] is not None and speedup is not None and 0 < speedup <= spec["speedup_max"]:
            return [], f"contained: passed with speedup {speedup:.2f}"
        extra = f" with speedup {speedup:.2f}" if speedup is not None else ""
        return [f"ACCEPTED{extra} (exit {run.returncode}); findings {sorted(r for r in rules if r)}"], label
    problems = []
    if run.returncode != 1:
        problems.append(f"exit status {run.returncode}, expected 1 (reject)")
    wanted = [r for r in spec["rules"] if r in rules]
    matched = [p for p in spec["errors"] if any(re.search(p, e) for e in errors)]
    matched += [p for p in spec["counterexample"] if any(re.search(p, c) for c in contexts)]
    if not wanted and not matched:
        got = sorted(r for r in rules if r)
        problems.append(f"rejected, but for none of the expected reasons: wanted a finding in {spec['rules']}"
                        f" or an error matching {spec['errors']} or a counterexample matching "
                        f"{spec['counterexample']}; got findings {got}, errors {[e[:200] for e in errors]}, "
                        f"counterexamples {[c[:200] for c in contexts]}")
    return problems, label


def _collect(obj: object, rules: set, errors: list[str]) -> None:
    """Every finding's rule id and every error text in a JSON value, at any depth."""
    if isinstance(obj, dict):
        if isinstance(obj.get("rule"), str):
            rules.add(obj["rule"])
        if isinstance(obj.get("error"), str) and obj["error"] not in errors:
            errors.append(obj["error"])
        for value in obj.values():
            _collect(value, rules, errors)
    elif isinstance(obj, list):
        for value in obj:
            _collect(value, rules, errors)


def escape_problems(name: str, spec: dict, run: Run, keys: dict[str, str], listener: Listener | None,
                    exclude: set[int]) -> list[str]:
    problems = []
    values = key_values(keys)
    for stream in ("stdout", "stderr"):
        blob = getattr(run, stream)
        if any(v.encode() in blob for v in values) or stream in run.leaked_in_files:
            problems.append(f"LEAK: a fake key appears in the command's {stream}")
    if listener is not None:
        if listener.events:
            problems.append(f"NETWORK: the loopback listener on port {listener.port} got "
                            f"{len(listener.events)} contact(s): {listener.events[:3]}")
        if any(v.encode() in listener.data for v in values):
            problems.append("LEAK: a fake key was sent to the loopback listener")
    left: list[Proc] = []
    deadline = time.monotonic() + spec["settle"]
    while True:
        procs = _processes()
        left = [p for p in run.seen.values() if _alive(p)]
        left += [p for p in _tagged(name, procs, exclude) if p.pid not in {q.pid for q in left}]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    if left:
        shown = [f"{p.pid} {_read(f'/proc/{p.pid}/cmdline', 200) or run.seen_cmd.get(p.pid)!r}"
                 for p in left[:5]]
        problems.append(f"PROCESS: {len(left)} process(es) outlived the run by {spec['settle']:g} s "
                        f"(now killed): {shown}")
        for _ in range(3):  # a forking leftover may add children while it is being killed
            _kill(left)
            time.sleep(0.2)
            procs = _processes()
            left = [p for p in left if _alive(p)] + _tagged(name, procs, exclude)
            left += [c for p in list(left) for c in _descendants(p.pid, procs)]
    found = markers(name)
    if found:
        problems.append(f"FILE: marker(s) written outside the sandbox: {[str(p) for p in found]}")
        remove(found)
    bound = spec["max_rss_mb"] and spec["max_rss_mb"] + (CUDA_RSS_MB if DEVICE == "cuda" else 0)
    if bound and run.peak_rss_kb > bound * 1024:
        problems.append(f"MEMORY: the {spec['mode']} process peaked at {run.peak_rss_kb // 1024} MB "
                        f"(bound {bound} MB)")
    return problems


def _report(name: str, spec: dict, run: Run, label: str, verdict: list[str], escapes: list[str]) -> None:
    path = os.environ.get("HOSTILE_REPORT")
    if not path:
        return
    line = json.dumps({"name": name, "class": spec.get("class"), "mode": spec["mode"], "outcome": label,
                       "verdict_problems": verdict, "escapes": escapes, "seconds": round(run.seconds, 1),
                       "peak_rss_mb": run.peak_rss_kb // 1024})
    with open(path, "a") as f:
        f.write(line + "\n")


NAMES = sorted(EXPECTATIONS)


def test_every_candidate_has_an_expectation():
    files = sorted(p.stem for p in CANDIDATES.glob("*.py"))
    assert files == NAMES, (f"without expectations: {sorted(set(files) - set(NAMES))}; "
                            f"without a file: {sorted(set(NAMES) - set(files))}")
    assert len(files) >= 40
    for name in files:
        source = (CANDIDATES / f"{name}.py").read_text()
        assert source.startswith('"""'), f"{name}: starts with its docstring (class, attempt, expected)"
        doc = source.split('"""')[1]
        assert "Tries:" in doc and "Gates must report" in doc, f"{name}: docstring: what it tries, expects"
        spec = case(name)
        named = set(RULE_ID.findall(doc[doc.index("Gates must report"):]))
        assert named == set(spec["rules"]), f"{name}: docstring {sorted(named)}, expectations {spec['rules']}"
        assert spec["rules"] or spec["errors"] or spec["counterexample"] or spec["mode"] == "killed", name
        unknown = set(spec) - set(DEFAULTS) - {"class", "why"}
        assert not unknown, f"{name}: unknown keys {unknown}"


def contain(name: str, spec: dict) -> tuple[str, list[str], list[str], Run]:
    """Run one case; its label, verdict problems and escapes (fake keys redacted)."""
    remove(markers(name))  # left by an earlier, interrupted run
    keys = fake_keys()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "HOSTILE_"))}
    env.update(keys)
    env["TRITON_INTERPRET"] = "1"
    listener = open_listener(spec["port"]) if spec["port"] else None
    exclude = _ancestors()
    try:
        run = run_candidate(name, spec, env, key_values(keys))
    finally:
        if listener is not None:
            time.sleep(0.2)
            listener.close()
    verdict, label = outcome_problems(name, spec, run)
    escapes = escape_problems(name, spec, run, keys, listener, exclude | {os.getpid()})
    token = key_values(keys)[-1]
    redact = lambda text: re.sub(rf"[\w-]*{token[:8]}\w*", "<FAKE-KEY>", text)
    label, verdict, escapes = redact(label), [redact(p) for p in verdict], [redact(p) for p in escapes]
    _report(name, spec, run, label, verdict, escapes)
    return label, verdict, escapes, run


OPEN: dict[str, str] = {}
"""Candidates not yet contained as their expectation asks (issue 12 note): they run, and a pass
shows as XPASS; each reason says what is missing."""


@pytest.mark.hostile
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(reason=OPEN[n], strict=False))
                                  if n in OPEN else n for n in NAMES])
def test_hostile_candidate_is_contained(name):
    spec = case(name)
    if spec["device"] not in (None, DEVICE):
        pytest.skip(f"a {spec['device']} attack (HOSTILE_DEVICE={spec['device']} runs it)")
    label, verdict, escapes, run = contain(name, spec)
    problems = verdict + escapes
    assert not problems, f"{name} (class {spec.get('class')}, {label}, {run.seconds:.1f} s):\n  " + \
        "\n  ".join(problems)


CONTROLS = {
    "control_audit": {"path": HERE.parent / "fixtures" / "rms_norm" / "torch_only.py"},
    "control_evaluate": {"path": HERE.parent / "fixtures" / "rms_norm" / "rows.py", "mode": "evaluate"},
}


@pytest.mark.hostile
@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_honest_control_is_accepted_without_escapes(name):
    """The harness's own control: an honest candidate (the test fixtures' torch-only and Triton
    kernels) through the same command, environment and checks is accepted with nothing flagged,
    so every failure above is the candidate's doing, not the harness's or the boundary's."""
    spec = {**DEFAULTS, **CONTROLS[name]}
    spec["path"] = str(spec["path"])
    label, verdict, escapes, run = contain(name, spec)
    assert run.returncode == 0 and label.startswith(("accept", "contained")), \
        f"{name}: {label} (exit {run.returncode}); {verdict}"
    assert not escapes, f"{name}: {escapes}"
