"""The runner's operating-system cage, applied by the runner to itself before it loads a
candidate (it starts as the judge's child and drops what it will not need).

Layers, each best effort and each reported in `Isolation` so the judge can say which are active:
- network: a new network namespace (no interface up), when the kernel lets us make one;
- files: a new mount namespace where the project, the home directory, the parent of the
  project and the shared temporary directories are covered by empty tmpfs mounts, with only
  what Python needs (its prefix, site-packages) and the runner's own work directory bound
  back in;
- user: an unprivileged uid and gid of its own (when started as root), so it can write
  nowhere but its work directory and everything it starts can be killed by uid;
- limits: rlimits on address space (CPU), processes, file size, open files, CPU time, cores;
- no new privileges (setuid binaries do not elevate), and death with the judge.
The in-process audit hook (`gates.runner.hooks`) is a second line behind these: it names what a
candidate tried, as findings. Uses only the standard library (ctypes for the system calls).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
import signal
from dataclasses import asdict, dataclass, field

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


@dataclass
class Isolation:
    """Which layers of the cage are active in this runner."""

    network: str = "audit-hook"
    """"namespace" (no network at all) or "audit-hook" (Python sockets refused)."""
    files: str = "audit-hook"
    """"namespace" (project, home and temp dirs hidden) or "audit-hook"."""
    uid: int = -1
    """The runner's uid when it dropped root; -1 when it kept the judge's."""
    limits: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


def _call(fn, *args) -> None:
    if fn(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: s.encode() if s is not None else None
    _call(_libc.mount, enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data))


def die_with_parent() -> None:
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _ancestor_of(path: str, others: list[str]) -> bool:
    return any(o == path or o.startswith(path.rstrip("/") + "/") for o in others)


def _cover(root: str, keep: list[str]) -> None:
    """Mount an empty tmpfs over `root` and bind the kept paths under it back in place."""
    inside = [k for k in keep if k.startswith(root.rstrip("/") + "/")]
    fds = {k: os.open(k, os.O_PATH) for k in inside if os.path.exists(k)}
    try:
        # /dev/shm stays usable (libraries take multiprocessing locks at import: sem_open), as
        # an empty tmpfs only this runner's mount namespace sees.
        mode = "1777" if root == "/dev/shm" else "0755"
        _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={mode},size=16m")
        for k, fd in sorted(fds.items()):
            if os.path.isdir(f"/proc/self/fd/{fd}"):
                os.makedirs(k, mode=0o755, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(k), mode=0o755, exist_ok=True)
                open(k, "a").close()
            _mount(f"/proc/self/fd/{fd}", k, None, MS_BIND | MS_REC)
    finally:
        for fd in fds.values():
            os.close(fd)


def _unshare(flags: int) -> bool:
    return _libc.unshare(ctypes.c_int(flags)) == 0


def _enter_namespaces(iso: Isolation, hide: list[str], keep: list[str]) -> None:
    root = os.geteuid() == 0
    if not root:
        # An unprivileged user namespace, where the kernel allows one, gives the same powers.
        uid, gid = os.getuid(), os.getgid()
        if _unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET):
            try:
                with open("/proc/self/setgroups", "w") as f:
                    f.write("deny")
                with open("/proc/self/uid_map", "w") as f:
                    f.write(f"0 {uid} 1")
                with open("/proc/self/gid_map", "w") as f:
                    f.write(f"0 {gid} 1")
            except OSError as exc:
                iso.notes.append(f"user namespace map failed: {exc}")
            iso.network = "namespace"
        else:
            iso.notes.append("no user namespace (unprivileged user namespaces are disabled)")
            return
    elif _unshare(CLONE_NEWNET):
        iso.network = "namespace"
        if not _unshare(CLONE_NEWNS):
            iso.notes.append(f"no mount namespace: {os.strerror(ctypes.get_errno())}")
            return
    else:
        iso.notes.append(f"no network namespace: {os.strerror(ctypes.get_errno())}")
        if not _unshare(CLONE_NEWNS):
            return
    try:
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
        roots = sorted({os.path.realpath(h) for h in hide if os.path.isdir(h)})
        roots = [r for r in roots if r != "/" and not any(r.startswith(o + "/") for o in roots if o != r)]
        for r in roots:
            _cover(r, keep)
        iso.files = "namespace"
    except OSError as exc:
        iso.notes.append(f"could not hide files: {exc}")


def _reachable_by_others(paths: list[str]) -> bool:
    """Whether every kept path can be reached by an unprivileged uid (o+x on every directory
    above it): where it cannot and files are not re-mounted, dropping root would break Python."""
    for p in paths:
        parts = p.rstrip("/").split("/")
        for i in range(2, len(parts) + 1):
            d = "/".join(parts[:i])
            try:
                if os.path.isdir(d) and not os.stat(d).st_mode & 0o001:
                    return False
            except OSError:
                return False
    return True


def _limit(iso: Isolation, name: str, value: int) -> None:
    which = getattr(resource, name)
    _, hard = resource.getrlimit(which)
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    try:
        resource.setrlimit(which, (value, value))
        iso.limits[name] = value
    except (ValueError, OSError) as exc:
        iso.notes.append(f"{name} not set: {exc}")


def enter(workdir: str, *, uid: int, hide: list[str], keep: list[str], memory_bytes: int | None,
          cpu_seconds: int, processes: int, file_bytes: int, open_files: int) -> Isolation:
    """Apply the cage to this process (the runner, before it loads anything of the candidate's)."""
    iso = Isolation()
    die_with_parent()
    _enter_namespaces(iso, hide, keep + [workdir])
    _limit(iso, "RLIMIT_CORE", 0)
    _limit(iso, "RLIMIT_FSIZE", file_bytes)
    _limit(iso, "RLIMIT_NOFILE", open_files)
    _limit(iso, "RLIMIT_CPU", cpu_seconds)
    if memory_bytes:
        with open("/proc/self/statm") as f:
            current = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        _limit(iso, "RLIMIT_AS", current + memory_bytes)
    if os.geteuid() == 0 and uid > 0:
        if iso.files == "namespace" or _reachable_by_others(keep):
            os.chown(workdir, uid, uid)
            for base, dirs, files in os.walk(workdir):
                for name in dirs + files:
                    os.lchown(os.path.join(base, name), uid, uid)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            iso.uid = uid
        else:
            iso.notes.append("kept the judge's uid: Python is not reachable by an unprivileged uid")
    # Processes are counted per uid: only with a uid of its own does the limit bound the runner alone.
    if iso.uid > 0:
        _limit(iso, "RLIMIT_NPROC", processes)
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    die_with_parent()  # a uid change clears the parent-death signal
    return iso
