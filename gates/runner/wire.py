"""The runner's wire format: length-prefixed JSON headers over a Unix socket, with file
descriptors (the arena) passed alongside. Nothing is ever unpickled: a header is plain JSON,
and the side that reads it validates every field before it uses one."""

from __future__ import annotations

import json
import socket
import struct

MAX_HEADER = 1 << 20
"""Bytes one header may take; a longer one is a protocol violation."""
_LENGTH = struct.Struct("!I")
ALIGN = 256
"""Each tensor in the arena starts at a multiple of this many bytes: inputs one after the other
from the start, a call's outputs one after the other from where the judge says (both sides lay
them out with `aligned`)."""


def aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


class WireError(Exception):
    """The peer closed the connection or sent something that is not a valid header."""


def send(sock: socket.socket, header: dict, fds: tuple[int, ...] = ()) -> None:
    body = json.dumps(header, separators=(",", ":"), allow_nan=True).encode()
    if len(body) > MAX_HEADER:
        raise WireError(f"header of {len(body)} bytes exceeds {MAX_HEADER}")
    data = _LENGTH.pack(len(body)) + body
    if fds:
        socket.send_fds(sock, [data[:_LENGTH.size]], list(fds))
        sock.sendall(data[_LENGTH.size:])
    else:
        sock.sendall(data)


def _exactly(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 16))
        if not chunk:
            raise WireError("connection closed")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv(sock: socket.socket, max_fds: int = 0) -> tuple[dict, list[int]]:
    """One header and the file descriptors that came with it (at most `max_fds`; any beyond
    are closed). Raises WireError for a closed connection or anything but a JSON object."""
    fds: list[int] = []
    if max_fds:
        first, fds, _, _ = socket.recv_fds(sock, _LENGTH.size, max_fds)
        if not first:
            raise WireError("connection closed")
        prefix = first + (_exactly(sock, _LENGTH.size - len(first)) if len(first) < _LENGTH.size else b"")
    else:
        prefix = _exactly(sock, _LENGTH.size)
    (length,) = _LENGTH.unpack(prefix)
    if length > MAX_HEADER:
        raise WireError(f"header of {length} bytes exceeds {MAX_HEADER}")
    try:
        header = json.loads(_exactly(sock, length))
    except (UnicodeDecodeError, ValueError) as exc:
        raise WireError(f"header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise WireError(f"header is a {type(header).__name__}, not an object")
    return header, fds
