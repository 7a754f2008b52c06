import os
import socket

import pytest

# Triton kernels run through the interpreter on this CPU-only machine.
os.environ.setdefault("TRITON_INTERPRET", "1")

LOOPBACK = {"127.0.0.1", "::1", "localhost"}

SHARED_RUN_MODULES = ("test_archive.py", "test_bi_tax.py", "test_graph.py", "test_leftovers.py",
                      "test_measure_corpus.py", "test_pool.py", "test_ray.py")
"""Modules whose tests share one expensive module-scoped fixture (a measurement, a campaign, a worker
pool, a Ray cluster's reference results: 2-30 s each on the CPU). Under `pytest -n` each goes to one
worker as a whole (`pytest_xdist_make_scheduler`), so that fixture is made once, not once per worker."""

_CORPUS = "tests/test_dynamic_corpus.py::test_dynamic_verdict_matches_the_cpu_label["
RUN_FIRST = {
    "tests/test_guide.py::test_the_guides_commands_run": 104,
    "tests/test_ray.py": 90,
    "tests/test_pool.py": 57,
    "tests/test_openevolve.py::test_the_frameworks_campaign_runs_every_style_offline": 51,
    "tests/test_leftovers.py": 47,
    "tests/test_interrupt.py::test_sigint_stops_at_once_kills_workers_keeps_results_and_resumes": 44,
    f"{_CORPUS}decode_attention/fixed_chunk_split_kv.py]": 40,
    "tests/test_measure_corpus.py": 34,
    f"{_CORPUS}layer_norm/chunked_welford.py]": 25,
    "tests/test_resume.py::test_sigkill_then_resume_repeats_no_answered_call_and_loses_nothing": 24,
    f"{_CORPUS}decode_attention/grouped_decode.py]": 24,
    "tests/test_openevolve.py::test_sigint_stops_an_openevolve_loop_and_resume_finishes_it": 22,
    f"{_CORPUS}moe_topk_softmax/expert_chunks_for_prefill.py]": 20,
    f"{_CORPUS}moe_topk_softmax/row_per_program.py]": 20,
    "tests/test_makefile.py::test_make_demo_twice_writes_two_runs": 18,
    "tests/test_replay_run.py::test_the_recorded_h200_campaign_replays_on_the_cpu": 13,
    "tests/test_interrupt.py::test_until_idle_ends_once_every_loop_waits_then_status_and_resume": 13,
    "tests/test_graph.py": 12,
    "tests/test_transformers_export.py": 11,
}
"""Node-id prefixes of the longest tests and shared-fixture modules, with their seconds under
`pytest -n 2` on an otherwise idle 2-core CPU machine (`--durations=0`, summed per module). Under
`pytest -n` they are handed out first, longest first, so that the workers finish together instead
of one running a two-minute test alone at the end. Only the order depends on these figures: a stale
one costs time, never a test."""


def _run_first(nodeid: str) -> int:
    return max((s for prefix, s in RUN_FIRST.items() if nodeid.startswith(prefix)), default=0)


def pytest_collection_modifyitems(config, items):
    if hasattr(config, "workerinput"):  # an xdist worker: the controller schedules in this order
        items.sort(key=lambda item: -_run_first(item.nodeid))  # stable: the rest keep their order


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's: unknown without it
def pytest_xdist_make_scheduler(config, log):
    """`pytest -n N` (its default `--dist load`): tests one at a time, in the collection order above,
    to whichever worker is free, except that a module of SHARED_RUN_MODULES goes to one worker whole.
    (pytest-xdist's `--dist loadgroup` would read `xdist_group` marks through a node-id suffix that
    pytest 9 no longer takes, so the groups are named here by module.)"""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedRunScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module.rsplit("/", 1)[-1] in SHARED_RUN_MODULES else nodeid

    config.option.loadscopereorder = False  # keep the collection order (longest first), not by scope size
    return SharedRunScheduling(config, log)


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch):
    """Tests never reach a real model or any other host: only loopback and local (AF_UNIX)
    sockets connect, and no provider key or base URL from the developer's environment leaks in."""
    real_connect = socket.socket.connect

    def connect(sock, address):
        if sock.family != socket.AF_UNIX:
            host = address[0] if isinstance(address, tuple) else address
            if host not in LOOPBACK:
                raise AssertionError(f"test tried to reach {address}; only loopback is allowed")
        return real_connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL",
                "ANTHROPIC_AUTH_TOKEN", "AGENTLOOP_PRICES", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
