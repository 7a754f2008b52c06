"""A candidate's compiled kernels outlive its runner for the next runner of the same code only
(gates.judge.kernel_cache): real caged runners on the CPU, the candidate writing into its Triton cache
directory as Triton does on a GPU, and a hostile one planting links and odd names."""

from __future__ import annotations

import os

import pytest

from gates.contract import get_task
from gates.judge import kernel_cache
from gates.judge.client import Runner
from gates.judge.runner_pool import reference_dirs

RMS = get_task("rms_norm")
WRITES = '''
import os
cache = os.environ["TRITON_CACHE_DIR"]
os.makedirs(os.path.join(cache, "KEYA"), exist_ok=True)
with open(os.path.join(cache, "KEYA", "kernel.cubin"), "wb") as f:
    f.write(b"compiled {tag}")
os.makedirs(os.path.join(cache, "tmp.pid_1_2"), exist_ok=True)  # Triton's half-written entry
try:
    os.symlink("/etc/hostname", os.path.join(cache, "KEYA", "link.json"))
except OSError:
    pass

def rms_norm(x, weight, eps):
    return x
'''


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv(kernel_cache.VARIABLE, str(tmp_path / "store"))
    return tmp_path / "store"


def _load(code: str) -> Runner:
    runner = Runner("cpu", reference_dirs=reference_dirs(RMS))
    runner.load(code, "rms_norm")
    return runner


def test_a_second_runner_of_the_same_code_gets_its_kernels_and_other_code_does_not(store):
    code_a, code_b = WRITES.format(tag="a"), WRITES.format(tag="b") + "\n# another candidate\n"
    first = _load(code_a)
    first.stop()
    kept = store / first.code_hash / "KEYA"
    assert (kept / "kernel.cubin").read_bytes() == b"compiled a"
    assert sorted(os.listdir(kept)) == ["kernel.cubin"]  # no link, no half-written entry
    assert not (store / first.code_hash / "tmp.pid_1_2").exists()

    again = Runner("cpu", reference_dirs=reference_dirs(RMS))
    other = Runner("cpu", reference_dirs=reference_dirs(RMS))
    try:
        again.wait_ready()
        other.wait_ready()
        # restored before the candidate's import runs (which then finds its kernel compiled)
        assert kernel_cache.restore(first.code_hash, again.workdir, again.uid) == 1
        assert (open(os.path.join(again.workdir, ".triton", "KEYA", "kernel.cubin"), "rb").read()
                == b"compiled a")
        other.load(code_b, "rms_norm")
        assert (open(os.path.join(other.workdir, ".triton", "KEYA", "kernel.cubin"), "rb").read()
                == b"compiled b")  # its own, freshly written: nothing of a's came in
    finally:
        again.stop()
        other.stop()


def test_the_judge_copies_only_regular_files_it_can_vouch_for(tmp_path, store):
    work = tmp_path / "runner"
    cache = work / ".triton"
    (cache / "KEY").mkdir(parents=True)
    (cache / "KEY" / "ok.json").write_text("{}")
    (cache / "KEY" / "hard").write_text("x")
    os.link(cache / "KEY" / "hard", tmp_path / "elsewhere")  # a hard link: not the runner's alone
    (cache / "KEY" / "link").symlink_to("/etc/hostname")
    (cache / "KEY" / "..hidden").write_text("x")
    (cache / "KEY" / "sub").mkdir()
    (cache / "bad name").mkdir()
    (cache / "bad name" / "f").write_text("x")
    assert kernel_cache.keep("h", str(work), -1) == 1
    kept = sorted(p.relative_to(store / "h").as_posix() for p in (store / "h").rglob("*"))
    assert kept == ["KEY", "KEY/ok.json"]


def test_the_store_is_bounded(tmp_path, store, monkeypatch):
    monkeypatch.setattr(kernel_cache, "MAX_FILES", 3)
    cache = tmp_path / "runner" / ".triton" / "KEY"
    cache.mkdir(parents=True)
    for i in range(5):
        (cache / f"f{i}").write_text("x")
    assert kernel_cache.keep("h", str(tmp_path / "runner"), -1) == 3


def test_what_a_runner_built_while_booting_reaches_every_later_runner_and_candidates_do_not(store):
    boot = store / kernel_cache.BOOT / "DRIVER"
    booted = Runner("cpu", reference_dirs=reference_dirs(RMS))
    try:
        booted.wait_ready()
        # as Triton's driver module would be on a GPU, built before any candidate is loaded
        built = os.path.join(booted.workdir, ".triton", "DRIVER")
        os.makedirs(built)
        with open(os.path.join(built, "cuda_utils.so"), "wb") as f:
            f.write(b"driver")
        if booted.uid > 0:  # the runner's own files, as if it had written them
            for path in (os.path.dirname(built), built, os.path.join(built, "cuda_utils.so")):
                os.chown(path, booted.uid, booted.uid)
        booted.load(WRITES.format(tag="a"), "rms_norm")  # the candidate writes KEYA at import
    finally:
        booted.stop()
    assert sorted(p.name for p in (store / kernel_cache.BOOT).iterdir()) == ["DRIVER"]
    assert (boot / "cuda_utils.so").read_bytes() == b"driver"

    later = Runner("cpu", reference_dirs=reference_dirs(RMS))
    try:
        later.wait_ready()
        path = os.path.join(later.workdir, ".triton", "DRIVER", "cuda_utils.so")
        assert open(path, "rb").read() == b"driver"
        if later.uid > 0:  # handed to the runner's own uid by the cage
            assert os.stat(path).st_uid == later.uid
    finally:
        later.stop()
