"""What tests/test_ray.py does as a Ray driver, and a command line that does it in a process of
its own.

Ray's client can abort a process that joined a cluster a minute or so after the cluster's head
is gone. The two-node test kills its cluster's head at the end, so the pytest process never joins
that cluster: it runs this file, which joins, does one thing, leaves, and writes what it saw as
JSON.

    python tests/ray_driver.py cpus ADDRESS N
        wait until the cluster has N CPUs, all free
    python tests/ray_driver.py resume ADDRESS CAMPAIGN OUT NODES REPORT
        resume the campaign's run in OUT on the cluster; once a stage runs, SIGKILL the node of
        its actor (NODES: JSON, node name -> the process group of its `ray start`) and the actor
        itself; write to REPORT what was killed and what the pool and the run counted
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import ray
import yaml
from procs import children, parent

if TYPE_CHECKING:
    from agentloop.evaluation.cluster.ray_pool import RayPool
# agentloop is imported where it is used: `cpus` starts in half a second without it, not four.


class Capture:
    """A pool factory that keeps the pool it made, for the test to watch."""

    def __init__(self, address: str, **options) -> None:
        self.address, self.options, self.pool = address, options, None

    def __call__(self, device: str, workers: int | None = None) -> RayPool:
        from agentloop.evaluation.cluster.ray_pool import RayPool

        self.pool = RayPool(device, self.address, **self.options)
        return self.pool


def kill_when_busy(capture: Capture, where, kill, stages=("dynamic", "correctness", "benchmark")) -> dict:
    """In the background: once a stage in `stages` runs on an actor that `where(actor info)` picks,
    `kill(that busy entry)`. The entry it killed lands in the returned dict, with the actor's
    child processes from before the kill; under "rerun", the busy entry of the same stage of the
    same candidate once it runs on another actor."""
    killed: dict = {}

    def watch() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and "rerun" not in killed:
            pool = capture.pool
            if pool is not None:
                infos = {a["pid"]: a for a in pool.actors()}
                for entry in pool.busy():
                    if not killed and entry["stage"] in stages and entry["pid"] in infos \
                            and where(infos[entry["pid"]]):
                        killed.update(entry, children=children(entry["pid"]))
                        kill(entry)
                    elif killed and (entry["hash"], entry["stage"]) == (killed["hash"], killed["stage"]) \
                            and entry["pid"] != killed["pid"]:
                        killed["rerun"] = entry
            time.sleep(0.02)

    threading.Thread(target=watch, daemon=True).start()
    return killed


def cpus(address: str, want: int) -> None:
    """Wait until the cluster has `want` CPUs, all free (a killed driver's actors released)."""
    ray.init(address=address, log_to_driver=False, configure_logging=False)
    try:
        deadline = time.monotonic() + 120
        while ray.available_resources().get("CPU", 0) < want:
            assert time.monotonic() < deadline, ray.available_resources()
            time.sleep(0.2)
    finally:
        ray.shutdown()


def resume(address: str, campaign: Path, out: Path, nodes: dict[str, int]) -> dict:
    """Resume the run on the cluster and lose the node of the first actor that runs a stage."""
    from agentloop.campaign.file import parse_campaign
    from agentloop.campaign.run import run_campaign

    cpus(address, len(nodes))  # the killed driver's actors are gone with it
    lost: dict = {}

    def lose_node(entry: dict) -> None:
        group = os.getpgid(parent(entry["pid"]))  # the actor's raylet, in its node's process group
        lost["node"] = next((name for name, g in nodes.items() if g == group), f"process group {group}")
        if lost["node"] in nodes:
            os.killpg(group, signal.SIGKILL)  # its raylet and the rest of the node's own processes
        os.kill(entry["pid"], signal.SIGKILL)  # the actor, in a session of its own, goes with its node

    capture = Capture(address)
    killed = kill_when_busy(capture, lambda info: True, lose_node,
                            stages=("compile", "dynamic", "correctness", "benchmark"))
    outcome = run_campaign(parse_campaign(yaml.safe_load(campaign.read_text())), out, resume=True,
                           pool_factory=capture)
    pool = capture.pool
    return {"killed": killed, "lost_node": lost.get("node"), "ran": outcome.ran,
            "cache_misses": outcome.cache_misses, "requeued": pool.requeued, "lost": pool.lost}


def main(argv: list[str]) -> None:
    command, address, *rest = argv
    if command == "cpus":
        cpus(address, int(rest[0]))
    elif command == "resume":
        campaign, out, nodes, report = rest
        seen = resume(address, Path(campaign), Path(out), json.loads(nodes))
        Path(report).write_text(json.dumps(seen))
    else:
        raise SystemExit(f"unknown command {command!r}; see {__file__}")


if __name__ == "__main__":
    main(sys.argv[1:])
