"""The Ray back-end on a real local Ray cluster: a small replay campaign gives the same results as
the local worker pool; an actor killed in the middle of a stage, and a whole node lost in the
middle of one, are survived with the stage run again on another actor; a driver killed with
SIGKILL resumes on the cluster without evaluating anything twice."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

ray = pytest.importorskip("ray", reason="the Ray back-end's tests need Ray: pip install 'agentloop[ray]'")

from procs import state  # noqa: E402
from ray_driver import Capture, kill_when_busy  # noqa: E402

from agentloop.campaign.file import parse_campaign  # noqa: E402
from agentloop.campaign.run import run_campaign  # noqa: E402
from agentloop.evaluation.pool import WorkerPool  # noqa: E402
from agentloop.results.store import Store  # noqa: E402

RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
           # A lost node is declared dead within seconds, not the default half minute.
           "RAY_health_check_initial_delay_ms": "1000", "RAY_health_check_period_ms": "1000",
           "RAY_health_check_timeout_ms": "1000", "RAY_health_check_failure_threshold": "3"}
# One task, both modes, one candidate per loop: the replay provider's first answer depends on the
# prompt only (later ones see timings in the feedback), so every back-end sees the same kernels.
CAMPAIGN = {"name": "ray", "tasks": ["rms_norm"], "styles": ["refine"], "modes": ["baseline", "bi-aware"],
            "model": "replay", "budget": {"iterations": 1}, "device": "cpu", "seed": 0,
            "eval": {"stage_timeout_s": {"compile": 60, "dynamic": 120, "correctness": 120,
                                         "benchmark": 120}}}


@pytest.fixture(scope="module", autouse=True)
def _ray_tmp():
    """Ray's sessions (logs, sockets, spilled objects) in a folder of this module's, removed at its
    end instead of piling up in /tmp/ray; a short path, as Ray's socket paths must be."""
    path = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    # The actors' own temporary folders (their judges' work directories) go there too: Ray kills
    # its actors when the cluster stops, before they can remove them.
    RAY_ENV["RAY_TMPDIR"] = RAY_ENV["TMPDIR"] = path
    yield path
    del RAY_ENV["RAY_TMPDIR"], RAY_ENV["TMPDIR"]
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(autouse=True)
def _ray_env(monkeypatch):
    for key, value in RAY_ENV.items():
        monkeypatch.setenv(key, value)
    yield
    if ray.is_initialized():  # a test that failed half-way leaves no connection to the next
        ray.shutdown()


def results(out: Path) -> dict:
    """What a run decided, without timings: each candidate's verdicts, each loop's final kernel."""
    store = Store(out / "results.sqlite")
    try:
        candidates = {(c["cell"], c["task"], c["iteration"]): (c["hash"], c["status"], c["rejected_by"],
                                                               c["bi_static"], c["bi_dynamic"], c["correct"])
                      for c in store.candidates()}
        finals = {(r["cell"], r["task"]): (r["correct"], r["bi_pass"], r["final_candidate"] is not None)
                  for r in store.task_results()}
        stages = {}
        for row in store.query("SELECT hash, result FROM evaluations"):
            outcome = json.loads(row["result"])
            stages[row["hash"]] = {s: (o["passed"], o["error"]) for s, o in outcome.items()}
    finally:
        store.close()
    return {"candidates": candidates, "finals": finals, "stages": stages}


@pytest.fixture(scope="module")
def local_results(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("local") / "run"
    run_campaign(parse_campaign(CAMPAIGN), out, pool_factory=lambda device, workers: WorkerPool(device, 2))
    return results(out)


def _gone(pids: list[int], within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(state(p) != "Z" for p in pids):
            return True
        time.sleep(0.2)
    return False


@pytest.mark.timeout(400)
def test_ray_campaign_matches_the_local_pool_and_survives_a_killed_actor(tmp_path, local_results):
    capture = Capture("local", actors=2)
    killed = kill_when_busy(capture, lambda info: True, lambda e: os.kill(e["pid"], signal.SIGKILL))
    outcome = run_campaign(parse_campaign({**CAMPAIGN, "cluster": {"ray": "local"}}), tmp_path / "run",
                           pool_factory=capture)
    pool = capture.pool
    assert killed, "no stage ran on an actor"
    assert outcome.loops == outcome.ran == 2
    assert results(tmp_path / "run") == local_results
    # The stage was queued again once and run on another actor; the dead one was replaced.
    assert pool.requeued == 1 and len(pool.lost) == 1
    assert f"actor {killed['pid']}" in pool.lost[0] and f"during the {killed['stage']} stage" in pool.lost[0]
    # The killed actor's judge worker and runners did not outlive it.
    assert _gone(killed["children"], 20), killed["children"]
    assert not ray.is_initialized()  # the pool started this Ray instance, and stopped it
    line = json.loads((tmp_path / "run" / "provenance.jsonl").read_text().splitlines()[-1])
    assert line["evaluation"].startswith("ray local: ")
    # The actors' runners said which cage they are in, as the local pool's do.
    cage = line["isolation"]
    assert cage["network"] and cage["files"] and cage["arena"] == "host"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray_start(args: list[str], log: Path) -> subprocess.Popen:
    """A Ray node in its own process group (so that killing the group kills the node)."""
    ray_bin = Path(sys.executable).parent / "ray"
    return subprocess.Popen([str(ray_bin), "start", "--block", "--disable-usage-stats", *args],
                            env={**os.environ, **RAY_ENV}, start_new_session=True, stdout=log.open("w"),
                            stderr=subprocess.STDOUT)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(30)


@pytest.fixture
def nodes(tmp_path):
    """A head node with no CPU for evaluation actors (the drivers join the cluster there) and two
    more nodes (`ray start --address`), a and b, one CPU each: (address, {name: node process})."""
    port = _free_port()
    head = _ray_start(["--head", f"--port={port}", "--num-cpus=0", "--include-dashboard=false"],
                      tmp_path / "head.log")
    address = f"127.0.0.1:{port}"
    nodes: dict[str, subprocess.Popen] = {}
    try:
        ray_bin = str(Path(sys.executable).parent / "ray")
        deadline = time.monotonic() + 120
        while subprocess.run([ray_bin, "status", f"--address={address}"], capture_output=True,
                             env={**os.environ, **RAY_ENV}, timeout=60).returncode != 0:
            assert head.poll() is None and time.monotonic() < deadline, (tmp_path / "head.log").read_text()
            time.sleep(0.5)
        for cpus, name in enumerate("ab", 1):  # one after the other: nodes starting together clash
            nodes[name] = _ray_start([f"--address={address}", "--num-cpus=1"], tmp_path / f"node_{name}.log")
            _driver(tmp_path, "cpus", address, str(cpus))
        yield address, nodes
    finally:
        for proc in [*nodes.values(), head]:
            _kill_group(proc)
        # `ray start` recorded the head: forget it
        current = Path(RAY_ENV["RAY_TMPDIR"]) / "ray" / "ray_current_cluster"
        if current.is_file() and current.read_text().strip().endswith(f":{port}"):
            current.unlink()


def _driver(tmp_path: Path, *args: str) -> None:
    """tests/ray_driver.py in a process of its own (this one never joins a cluster it kills)."""
    log = tmp_path / f"ray_driver_{args[0]}.log"
    with log.open("a") as sink:
        done = subprocess.run([sys.executable, str(Path(__file__).with_name("ray_driver.py")), *args],
                              env={**os.environ, **RAY_ENV}, stdout=sink, stderr=subprocess.STDOUT,
                              timeout=400)
    assert done.returncode == 0, log.read_text()[-5000:]


@pytest.mark.timeout(500)
def test_two_nodes_a_killed_driver_resumes_and_a_lost_node_is_survived(tmp_path, nodes, local_results):
    address, processes = nodes
    campaign = tmp_path / "campaign.yaml"
    campaign.write_text(yaml.safe_dump(CAMPAIGN))
    out = tmp_path / "run"
    log = tmp_path / "driver.log"
    # The driver, killed with SIGKILL once a stage is cached and before any loop has finished.
    driver = subprocess.Popen([sys.executable, "-m", "agentloop.cli", "-q", "run", str(campaign), "--out",
                               str(out), "--ray", address],
                              env={**os.environ, **RAY_ENV, "TRITON_INTERPRET": "1"},
                              stdout=log.open("w"), stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 240
        while not _cached(out):
            assert driver.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    finally:
        if driver.poll() is None:
            driver.kill()
    before = results(out)
    assert not before["finals"] and before["stages"]
    cached = sum(len(s) for s in before["stages"].values())

    # Resumed on the same cluster, by a driver of its own; the node of the actor that runs the
    # first stage is lost in the middle of it, and the stage runs again on the other node.
    report = tmp_path / "report.json"
    groups = {name: proc.pid for name, proc in processes.items()}
    _driver(tmp_path, "resume", address, str(campaign), str(out), json.dumps(groups), str(report))
    seen = json.loads(report.read_text())
    killed = seen["killed"]
    assert killed, "no stage ran on an actor"
    assert seen["lost_node"] in groups, seen["lost_node"]  # the actor was on node a or b, now lost
    assert processes[seen["lost_node"]].poll() is not None
    assert "rerun" in killed, "the stage did not run again on another actor"
    assert killed["rerun"]["node"] != killed["node"]  # on the node that is left
    assert seen["ran"] == 2 and seen["cache_misses"] + cached == sum(
        len(s) for s in results(out)["stages"].values())  # nothing evaluated twice
    assert results(out) == local_results
    assert seen["requeued"] == 1 and len(seen["lost"]) == 1
    assert f"actor {killed['pid']}" in seen["lost"][0]
    assert f"during the {killed['stage']} stage" in seen["lost"][0]
    assert _gone(killed["children"], 20), killed["children"]


def _cached(out: Path) -> bool:
    if not (out / "results.sqlite").is_file():
        return False
    try:
        store = Store(out / "results.sqlite")
        try:
            return bool(store.query("SELECT 1 FROM evaluations LIMIT 1"))
        finally:
            store.close()
    except Exception:  # noqa: BLE001 - the driver is creating it
        return False


def test_ray_selection_and_errors(tmp_path, monkeypatch):
    from agentloop.campaign.backend import evaluation_pool, ray_address
    from agentloop.campaign.file import CampaignError
    from agentloop.evaluation.cluster.ray_pool import ClusterError, connect

    plain = parse_campaign(CAMPAIGN)
    on_ray = parse_campaign({**CAMPAIGN, "cluster": {"ray": "auto", "workers_per_actor": 2}})
    assert ray_address(plain) is None and evaluation_pool(plain) is WorkerPool
    assert ray_address(on_ray) == "auto" and ray_address(on_ray, "off") is None
    assert ray_address(plain, "10.0.0.1:6379") == "10.0.0.1:6379"
    with pytest.raises(CampaignError, match="cluster.actors"):
        parse_campaign({**CAMPAIGN, "cluster": {"ray": "auto", "actors": 0}})
    # No cluster at the address: one line saying what to do.
    monkeypatch.setenv("RAY_ADDRESS", "")
    with pytest.raises(ClusterError, match=r"cannot join the Ray cluster at 127\.0\.0\.1:\d+: .*check the"):
        connect(f"127.0.0.1:{_free_port()}")
    assert not ray.is_initialized()
    # Without Ray installed, asking for it fails before anything runs.
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(CampaignError, match=re.escape("pip install 'agentloop[ray]'")):
        evaluation_pool(on_ray)


def test_a_replacement_killed_by_close_is_not_reported_as_failing_to_start():
    """close() kills a replacement actor still waiting for a node; its `info` then fails, which
    is no failure to report (the log used to say "an actor could not start")."""
    import threading

    from agentloop.evaluation.cluster.ray_pool import RayPool, _Actor

    class Gone:
        def get(self, ref):
            raise RuntimeError("ActorDiedError: the actor died because its owner killed it")

        def kill(self, handle, no_restart=True):
            pass

    pool = object.__new__(RayPool)  # only what _admit reads: no cluster is needed for this
    pool.ray, pool._cond, pool._starting = Gone(), threading.Condition(), []
    for closed in (True, False):
        pool._closed = closed
        actor = _Actor(handle=object())
        pool._starting.append(actor)
        problem = pool._admit(actor, "ref")
        if closed:
            assert problem is None
        else:  # a real failure to start is still reported
            assert problem.startswith("an actor could not start: ActorDiedError")
        assert not actor.alive and actor not in pool._starting


def test_the_cage_is_the_first_actors_with_a_note_for_each_actor_that_differs():
    """RayPool.isolation asks every actor; one that cannot answer is left out, one whose cage
    differs (another node's kernel, another memory limit) gets a note the run prints."""
    import threading

    from agentloop.evaluation.cluster.ray_pool import RayPool, _Actor
    from gates.judge.isolation import describe_isolation

    caged = {"network": "namespace", "files": "namespace", "uid": 1001, "limits": {"NPROC": 512},
             "arena": "host"}
    blocked = {**caged, "network": "socket block (the kernel refused a network namespace)", "uid": 1002}

    class Handle:
        def __init__(self, answer):
            self.isolation = type("Method", (), {"remote": staticmethod(lambda: answer)})

    class Ray:
        def get(self, answer, timeout=None):
            if isinstance(answer, Exception):
                raise answer
            return answer

    def pool_of(*answers):
        pool = object.__new__(RayPool)  # only what isolation() reads: no cluster is needed
        pool.ray, pool._cond, pool._closed, pool.start_timeout = Ray(), threading.Condition(), False, 1.0
        pool._actors = [_Actor(handle=Handle(a), info={"pid": 10 + i, "host": f"node{i}"})
                        for i, a in enumerate(answers)]
        return pool

    assert pool_of(caged, {**caged, "uid": 1005}).isolation() == caged  # the same cage, another uid
    lost = RuntimeError("RayActorError: the actor died")
    assert pool_of(lost, blocked).isolation() == blocked  # the first actor was lost meanwhile
    assert pool_of(lost).isolation() == {}
    mixed = pool_of(caged, lost, blocked).isolation()
    assert mixed["network"] == "namespace"
    assert mixed["notes"] == [f"actor 12 on node2: {describe_isolation(blocked)}"]
    assert "network socket block" in describe_isolation(mixed)
    pool = pool_of(caged)
    pool._closed = True
    with pytest.raises(RuntimeError):  # what the run's isolation thread expects of a closed pool
        pool.isolation()
