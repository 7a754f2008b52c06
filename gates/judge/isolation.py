"""Which cage a judge's runners have, as a runner reported it when it booted, and the one line
that says so (`agentloop audit`'s `caged:` line, a run's first lines, the verdict's isolation)."""

from __future__ import annotations

from typing import Any

from gates.judge.arena import DeviceArena, device_arena_refused
from gates.judge.runner_pool import RUNNERS


def runner_isolation() -> dict[str, Any]:
    """Which layers of the cage this judge's runners have, as a runner reported them when it
    booted (before any candidate), and which arena they get: a sandbox job, for the audit's
    verdict and the run's first lines. Empty when no runner has booted."""
    if RUNNERS.current is None:
        RUNNERS.wait_spare()
    runner = RUNNERS.current or next(iter(RUNNERS.spares), None)
    if runner is None:
        return {}
    iso = dict(runner.isolation)
    if runner.device == "cpu":
        iso["arena"] = "host"
    elif isinstance(runner.arena, DeviceArena):
        iso["arena"] = "device"
    else:
        refused = f" (the driver refused device memory: {device_arena_refused[0][:120]})" \
            if device_arena_refused else ""
        iso["arena"] = "host" + refused
    return iso


def describe_isolation(iso: dict[str, Any]) -> str:
    """One line: `network namespace, files namespace, own uid, limits AS 4 GiB NPROC 512 ...,
    arena host`, and any layer the kernel did not allow, from `runner_isolation()`."""
    if not iso:
        return "unknown (no runner booted)"
    text = lambda key: str(iso.get(key, "?"))[:40]  # noqa: E731
    uid = iso.get("uid")
    parts = [f"network {text('network')}", f"files {text('files')}",
             f"own uid {uid}" if type(uid) is int and uid >= 0 else "the judge's uid"]
    limits = iso.get("limits")
    if isinstance(limits, dict) and limits:
        names = {str(k): str(k).removeprefix("RLIMIT_")[:8] for k in limits}
        shown = [f"{names[str(k)]} {_amount(names[str(k)], v)}" for k, v in list(limits.items())[:10]]
        parts.append("limits " + ", ".join(shown))
    if "arena" in iso:
        parts.append(f"arena {text('arena')}")
    notes = iso.get("notes")
    line = ", ".join(parts)
    if isinstance(notes, list) and notes:
        line += "; " + "; ".join(str(n)[:100] for n in notes[:3])
    return line


def _amount(name: str, value: object) -> str:
    if type(value) is not int:
        return "?"
    if name in ("AS", "FSIZE", "DATA", "RSS") and value >= 2**20:
        return f"{value / 2**30:.3g} GiB" if value >= 2**30 else f"{value // 2**20} MiB"
    return str(value)
