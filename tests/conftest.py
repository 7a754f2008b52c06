import os
import socket

import pytest

# Triton kernels run through the interpreter on this CPU-only machine.
os.environ.setdefault("TRITON_INTERPRET", "1")

LOOPBACK = {"127.0.0.1", "::1", "localhost"}


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
