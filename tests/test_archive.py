"""The kernel archive: a run adds every kernel it accepts (task, device, dtype, mode, verdicts,
per-shape times), and a later campaign with `archive: {seed_kernels: N}` starts its loops from the
archive's best kernels for their task and mode: they are the loop's first candidates, and the
first candidate the LLM proposes derives from them (refine), is bred from them (evolve) or is
written with them in view (team)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from loop_fakes import FAKE_CORPUS, FakePool, marks

from agentloop.campaign.file import parse_campaign
from agentloop.campaign.run import run_campaign
from agentloop.results.archive import Archive, ArchiveOptions
from agentloop.results.store import Store


def campaign(name: str, **extra):
    return parse_campaign({
        "name": name, "tasks": ["rms_norm"], "styles": ["refine", "evolve", "team"],
        "modes": ["baseline", "bi-aware"], "model": "replay",
        "model_options": {"tasks_dir": str(FAKE_CORPUS)}, "budget": {"iterations": 3}, "device": "cpu",
        **extra})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("archive")
    run_campaign(campaign("first"), root / "first", pool_factory=FakePool)
    run_campaign(campaign("second", archive={"seed_kernels": 2}), root / "second", pool_factory=FakePool)
    return root


def rows(path, sql, *params):
    store = Store(path)
    try:
        return store.query(sql, *params)
    finally:
        store.close()


def test_every_accepted_kernel_is_archived_with_its_measurements(runs):
    first = rows(runs / "first" / "results.sqlite", "SELECT * FROM candidates WHERE status = 'accepted'")
    archived = rows(runs / "archive.sqlite", "SELECT * FROM kernels WHERE run_dir = ?",
                    str((runs / "first").resolve()))
    assert first and len(archived) == len(first)
    assert {(r["cell"], r["iteration"]) for r in archived} == {(r["cell"], r["iteration"]) for r in first}
    for k in archived:
        assert (k["task"], k["device"], k["dtype"], k["campaign"]) == ("rms_norm", "cpu", "bfloat16", "first")
        assert k["speedup"] == marks(k["code"])[1]
        assert k["mode"] in ("baseline", "bi-aware") and k["style"] in ("refine", "evolve", "team")
        shapes = json.loads(k["shapes"])
        assert shapes[0]["dims"] == {"T": 1, "H": 256} and shapes[0]["candidate_ms"] == 1.0
        if k["mode"] == "bi-aware":
            assert k["bi_static"] == 1 and k["bi_dynamic"] == 1


def test_best_is_per_task_and_mode_distinct_and_fastest_first(runs):
    archive = Archive(runs / "archive.sqlite")
    try:
        first = (runs / "first").resolve()
        later = (runs / "second").resolve()
        aware = archive.best("rms_norm", "bi-aware", "cpu", limit=5, exclude_run=later)
        base = archive.best("rms_norm", "baseline", "cpu", limit=5, exclude_run=later)
        assert aware and all(k.run_dir == str(first) for k in aware + base)
        # bi-aware: only kernels through both BI gates; baseline: anything accepted, fastest first
        assert all("fail=" not in k.code for k in aware)
        assert [k.speedup for k in base] == sorted((k.speedup for k in base), reverse=True)
        assert base[0].speedup > aware[0].speedup  # the batch-variant kernels are faster here
        assert len({k.code for k in base}) == len(base)
        assert archive.best("rms_norm", "baseline", "cuda", limit=5) == []
        second = archive.best("rms_norm", "baseline", "cpu", limit=5, exclude_run=first)
        assert second and all(k.run_dir == str((runs / "second").resolve()) for k in second)
    finally:
        archive.close()


def seeded_loop(runs, cell):
    db = runs / "second" / "results.sqlite"
    candidates = rows(db, "SELECT * FROM candidates WHERE cell = ? ORDER BY iteration", cell)
    seeded = rows(db, "SELECT s.*, c.iteration FROM seeded s JOIN candidates c ON c.id = s.candidate_id "
                      "WHERE c.cell = ? ORDER BY c.iteration", cell)
    return candidates, seeded


@pytest.mark.parametrize("mode", ["baseline", "bi-aware"])
def test_refine_starts_from_the_archived_best(runs, mode):
    candidates, seeded = seeded_loop(runs, f"refine/{mode}/replay")
    archived = {r["id"]: r for r in rows(runs / "archive.sqlite", "SELECT * FROM kernels")}
    # The fake corpus has two distinct accepted kernels in baseline mode, one in bi-aware mode.
    n = 2 if mode == "baseline" else 1
    assert [s["iteration"] for s in seeded] == list(range(1, n + 1))
    best = archived[seeded[-1]["archive_id"]]
    assert best["mode"] == mode and best["run_dir"] == str((runs / "first").resolve())
    assert best["speedup"] == max(r["speedup"] for r in archived.values()
                                  if r["mode"] == mode and r["run_dir"] == best["run_dir"])
    assert candidates[n - 1]["code"] == best["code"] and candidates[n - 1]["status"] == "accepted"
    # The first candidate the LLM proposed derives from the archived best.
    first_proposed = candidates[n]
    assert first_proposed["parent"] == candidates[n - 1]["id"]
    # Seeds do not use the budget: three proposals besides them.
    assert len(candidates) == n + 3


def test_evolve_breeds_its_first_children_from_the_archive(runs):
    candidates, seeded = seeded_loop(runs, "evolve/baseline/replay")
    seed_ids = {c["id"] for c in candidates[:len(seeded)]}
    assert len(seeded) == 2
    first_children = [c for c in candidates[len(seeded):] if c["iteration"] <= len(seeded) + 2]
    assert first_children and all(c["parent"] in seed_ids for c in first_children)


def test_team_plans_with_the_archived_kernels_in_view(runs):
    candidates, seeded = seeded_loop(runs, "team/baseline/replay")
    assert len(seeded) == 2
    exchanges = rows(runs / "second" / "results.sqlite",
                     "SELECT * FROM exchanges WHERE cell = 'team/baseline/replay' ORDER BY id")
    planner = next(e for e in exchanges if e["role"] == "planner")
    coder = next(e for e in exchanges if e["role"] == "coder")
    best_code = candidates[len(seeded) - 1]["code"]
    assert "Candidate 1" in planner["request"] or "candidate 1" in planner["request"]
    assert best_code.splitlines()[-1].strip() in coder["request"]
    assert candidates[len(seeded)]["parent"] in {c["id"] for c in candidates[:len(seeded)]}


def test_the_seed_choice_is_saved_for_a_resume(runs):
    saved = json.loads((runs / "second" / "seeds.json").read_text())
    assert set(saved) == {f"{s}/{m}/replay|rms_norm" for s in ("refine", "evolve", "team")
                          for m in ("baseline", "bi-aware")}
    assert all(len(v) == (2 if "/baseline/" in loop else 1) for loop, v in saved.items())
    assert not (runs / "first" / "seeds.json").exists()


def test_the_archive_defaults_beside_the_run_directory(tmp_path):
    default = ArchiveOptions().file(tmp_path / "runs" / "x")
    assert default == (tmp_path / "runs" / "archive.sqlite").resolve()
    assert ArchiveOptions(path="/elsewhere/a.sqlite").file(tmp_path) == Path("/elsewhere/a.sqlite")
