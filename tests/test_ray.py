"""The Ray back-end on a real local Ray cluster: a small replay campaign gives the same results as
the local worker pool; an actor killed in the middle of a stage, and a whole node lost in the
middle of one, are survived with the stage run again on another actor; a driver killed with
SIGKILL resumes on the cluster without evaluating anything twice."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

ray = pytest.importorskip("ray", reason="the Ray back-end's tests need Ray: pip install 'agentloop[ray]'")

from agentloop.campaign import parse_campaign  # noqa: E402
from agentloop.cluster.ray_pool import RayPool  # noqa: E402
from agentloop.pool import WorkerPool  # noqa: E402
from agentloop.runner import run_campaign  # noqa: E402
from agentloop.store import Store  # noqa: E402

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


class Capture:
    """A pool factory that keeps the pool it made, for the test to watch."""

    def __init__(self, address: str, **options) -> None:
        self.address, self.options, self.pool = address, options, None

    def __call__(self, device: str, workers: int | None = None) -> RayPool:
        self.pool = RayPool(device, self.address, **self.options)
        return self.pool


def kill_when_busy(capture: Capture, where, kill, stages=("dynamic", "correctness", "benchmark")) -> dict:
    """In the background: once a stage in `stages` runs on an actor that `where(actor info)` picks,
    `kill(that busy entry)`; the entry it killed lands in the returned dict."""
    killed: dict = {}

    def watch() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            pool = capture.pool
            if pool is not None:
                infos = {a["pid"]: a for a in pool.actors()}
                for entry in pool.busy():
                    if entry["stage"] in stages and entry["pid"] in infos and where(infos[entry["pid"]]):
                        killed.update(entry, children=_children(entry["pid"]))
                        kill(entry)
                        return
            time.sleep(0.05)

    threading.Thread(target=watch, daemon=True).start()
    return killed


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _gone(pids: list[int], within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(Path(f"/proc/{p}").exists() and "Z" not in _state(p) for p in pids):
            return True
        time.sleep(0.2)
    return False


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"


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
def two_nodes(tmp_path):
    """A head node and a second node (`ray start --address`), one CPU each: (address, head, node)."""
    port = _free_port()
    head = _ray_start(["--head", f"--port={port}", "--num-cpus=1", "--include-dashboard=false"],
                      tmp_path / "head.log")
    address = f"127.0.0.1:{port}"
    node = None
    try:
        ray_bin = str(Path(sys.executable).parent / "ray")
        deadline = time.monotonic() + 120
        while subprocess.run([ray_bin, "status", f"--address={address}"], capture_output=True,
                             env={**os.environ, **RAY_ENV}, timeout=60).returncode != 0:
            assert head.poll() is None and time.monotonic() < deadline, (tmp_path / "head.log").read_text()
            time.sleep(0.5)
        node = _ray_start([f"--address={address}", "--num-cpus=1"], tmp_path / "node.log")
        yield address, head, node
    finally:
        for proc in (node, head):
            if proc is not None:
                _kill_group(proc)
        current = Path("/tmp/ray/ray_current_cluster")  # `ray start` recorded the head: forget it
        if current.is_file() and current.read_text().strip().endswith(f":{port}"):
            current.unlink()


def _cpus(address: str, want: int) -> None:
    """Wait until the cluster has `want` CPUs, all free (a killed driver's actors released)."""
    ray.init(address=address, log_to_driver=False, configure_logging=False)
    try:
        deadline = time.monotonic() + 120
        while ray.available_resources().get("CPU", 0) < want:
            assert time.monotonic() < deadline, ray.available_resources()
            time.sleep(0.2)
    finally:
        ray.shutdown()


@pytest.mark.timeout(500)
@pytest.mark.skipif(os.environ.get("RAY_TWO_NODES") != "1", reason=(
    "quarantined (RAY_TWO_NODES=1 runs it): it does not always get a stage onto the second node "
    "before the resumed campaign ends, and after it the test process's Ray client aborts the "
    "process about 60 s after the head is killed, taking down whatever test runs next"))
def test_two_nodes_a_killed_driver_resumes_and_a_lost_node_is_survived(tmp_path, two_nodes, local_results):
    address, head, node = two_nodes
    _cpus(address, 2)
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

    # Resumed on the same cluster; the second node is lost while one of its actors runs a stage.
    _cpus(address, 2)  # the killed driver's actors are gone with it
    capture = Capture(address)
    head_node = []

    def on_second_node(info: dict) -> bool:
        if not head_node:
            head_node.append(ray.get_runtime_context().get_node_id())  # the driver runs on the head
        return info["node"] != head_node[0]

    def lose_node(entry: dict) -> None:
        _kill_group(node)  # its raylet and the rest of the node's own processes
        os.kill(entry["pid"], signal.SIGKILL)  # the actor, in a session of its own, goes with its node

    killed = kill_when_busy(capture, on_second_node, lose_node, stages=("compile", "dynamic", "correctness",
                                                                        "benchmark"))
    outcome = run_campaign(parse_campaign(CAMPAIGN), out, resume=True, pool_factory=capture)
    pool = capture.pool
    assert killed, "no stage ran on the second node"
    assert outcome.ran == 2 and outcome.cache_misses + cached == sum(
        len(s) for s in results(out)["stages"].values())  # nothing evaluated twice
    assert results(out) == local_results
    assert pool.requeued == 1 and len(pool.lost) == 1
    assert f"during the {killed['stage']} stage" in pool.lost[0]
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
    from agentloop.campaign import CampaignError
    from agentloop.cluster import evaluation_pool, ray_address
    from agentloop.cluster.ray_pool import ClusterError, connect

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
