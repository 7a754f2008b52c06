"""Triton's compiled kernels of a candidate and its autotuning results, kept by the judge
between the candidate's runners.

Each stage of an evaluation may load the candidate into a fresh runner, and a fresh runner has an
empty Triton cache (its own work directory): without this store every stage compiled every
kernel specialisation again, which on the H200 made the full campaign about three times slower
than before the trust boundary. The judge copies a runner's cache out when the runner stops and
into the next runner that loads the same code, so each kernel is compiled once per candidate.

What crosses, and why it stays contained:
- only the runners of one code (by its sha256) share a store, so one candidate cannot plant a
  binary that another candidate's kernel would load;
- the judge copies regular files only (never a symlink or a hard link, never a file the
  runner's uid does not own), in Triton's layout (`<key>/<file>`, plain names), bounded in
  count and size; everything else in the cache is left behind with the runner;
- what a candidate can learn from it (that it was loaded before) a reused runner already tells it.
A second store, `BOOT`, holds what a runner compiled while it booted, before any candidate was
loaded (Triton's driver module for the GPU, built with the host compiler): it is trusted, and
every new runner starts with it, so none compiles it again.
The store lives as long as the pool that made it (`AGENTLOOP_KERNEL_CACHE`; its workers remove it
when the pool's process was killed), else as long as this process.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import stat
import tempfile
import threading

VARIABLE = "AGENTLOOP_KERNEL_CACHE"
"""The store's directory, shared by a pool's judge workers."""
OWNER = "AGENTLOOP_KERNEL_CACHE_OWNER"
"""The process id of the pool that made the store (`VARIABLE`) and removes it when it closes; a
judge worker whose parent is that process removes the store once that parent is gone without
doing it (killed)."""
SUBDIR = ".triton"
"""Where a runner's Triton cache is, in its work directory (gates.judge.environment)."""
MAX_FILES = 512
MAX_BYTES = 256 << 20
NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$")

BOOT = "_boot"
"""The store of what runners compile while booting (no candidate code has run in them yet)."""

_own: list[str] = []


def store_root() -> str:
    """The store of this pool (its variable), else one of this process, removed at exit."""
    root = os.environ.get(VARIABLE)
    if root:
        return root
    if not _own:
        _own.append(tempfile.mkdtemp(prefix="agentloop-kernels-"))
        atexit.register(shutil.rmtree, _own[0], True)
    return _own[0]


def remove_orphaned(parent: int) -> None:
    """In a judge worker whose parent `parent` is gone: remove the store that parent made for its
    workers (`OWNER`), which nobody else will; a store set any other way is left alone."""
    root = os.environ.get(VARIABLE)
    if root and os.environ.get(OWNER) == str(parent):
        shutil.rmtree(root, ignore_errors=True)


def _entries(top: str, owner: int | None) -> list[tuple[str, str, int]]:
    """(key, file, size) of the regular files in Triton's layout under `top`, within bounds."""
    found: list[tuple[str, str, int]] = []
    total = 0
    try:
        keys = sorted(os.listdir(top))
    except OSError:
        return found
    for key in keys:
        kdir = os.path.join(top, key)
        if not NAME.match(key) or key.startswith("tmp.") or not stat.S_ISDIR(os.lstat(kdir).st_mode):
            continue
        for name in sorted(os.listdir(kdir)):
            path = os.path.join(kdir, name)
            st = os.lstat(path)
            if not NAME.match(name) or not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 \
                    or (owner is not None and st.st_uid != owner):
                continue
            total += st.st_size
            if len(found) >= MAX_FILES or total > MAX_BYTES:
                return found
            found.append((key, name, st.st_size))
    return found


def _copy(src: str, dst: str) -> None:
    """Copy one file without following a link at the source; written under a temporary name and
    renamed, so a reader never sees half a file."""
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
    tmp = f"{dst}.part-{os.getpid()}-{threading.get_ident()}"  # runners of one judge stop in threads
    try:
        with os.fdopen(fd, "rb") as fin, open(tmp, "wb") as fout:
            shutil.copyfileobj(fin, fout)
        os.replace(tmp, dst)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def keep(code_hash: str, workdir: str, uid: int) -> int:
    """Copy what the runner of `code_hash` compiled into its store; the number of files copied.
    `uid`: the runner's (its files only), or -1 when it ran as the judge's."""
    src = os.path.join(workdir, SUBDIR)
    dst = os.path.join(store_root(), code_hash)
    copied = 0
    try:
        for key, name, _ in _entries(src, uid if uid > 0 else None):
            target = os.path.join(dst, key, name)
            if os.path.exists(target):
                continue
            os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
            _copy(os.path.join(src, key, name), target)
            copied += 1
    except OSError:  # a runner racing its own removal, a full disk: the cache is only a cache
        pass
    return copied


def restore(code_hash: str, workdir: str, uid: int) -> int:
    """Copy the store of `code_hash` into a runner's Triton cache (owned by its uid); the number
    of files copied."""
    src = os.path.join(store_root(), code_hash)
    dst = os.path.join(workdir, SUBDIR)
    copied = 0
    try:
        for key, name, _ in _entries(src, None):
            target = os.path.join(dst, key, name)
            os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
            _copy(os.path.join(src, key, name), target)
            copied += 1
        if uid > 0 and copied:
            for base, _dirs, files in os.walk(dst):
                os.chown(base, uid, uid)
                for name in files:
                    os.chown(os.path.join(base, name), uid, uid)
    except OSError:
        pass
    return copied


def keep_boot(workdir: str, uid: int) -> int:
    """Called once a runner has booted and before a candidate is loaded into it: keep what it
    compiled while booting, if the boot store is still empty."""
    if os.path.isdir(os.path.join(store_root(), BOOT)):
        return 0
    return keep(BOOT, workdir, uid)
