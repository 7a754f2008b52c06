"""`openai:` and `anthropic:` through their real SDKs against fake servers on 127.0.0.1 that speak
each wire protocol: answers with usage, 429 with retry-after, 5xx, 401, timeouts, lost
connections; and the exchange record of a short run against a loopback server."""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agentloop.providers import (
    ExchangeRecorder,
    Message,
    MissingKeyError,
    ProviderError,
    get_provider,
    read_exchanges,
)
from agentloop.providers.base import RetryableError

# The fake servers ----------------------------------------------------------------------------

@dataclass
class Reply:
    status: int = 200
    text: str = "ok"
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass
class Seen:
    at: float
    path: str
    headers: dict[str, str]
    body: dict


def _openai_body(reply: Reply, request: dict) -> dict:
    if reply.status != 200:
        return {"error": {"message": f"fake error {reply.status}", "type": "fake", "code": None}}
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": request.get("model"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": reply.text}}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}}


def _anthropic_body(reply: Reply, request: dict) -> dict:
    if reply.status != 200:
        return {"type": "error", "error": {"type": "fake_error", "message": f"fake error {reply.status}"}}
    half = len(reply.text) // 2
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": request.get("model"),
            "content": [{"type": "text", "text": reply.text[:half]},
                        {"type": "text", "text": reply.text[half:]}],
            "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 13, "output_tokens": 5}}


class FakeServer:
    """Answers requests with a script of replies (the last one repeats) and keeps what it saw."""

    def __init__(self, wire: str, script: list[Reply]):
        self.wire, self.script, self.seen = wire, list(script), []
        body_for = _openai_body if wire == "openai" else _anthropic_body
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                at = time.monotonic()
                request = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                server.seen.append(Seen(at, self.path, {k.lower(): v for k, v in self.headers.items()},
                                        request))
                reply = server.script[min(len(server.seen), len(server.script)) - 1]
                time.sleep(reply.delay_s)
                payload = json.dumps(body_for(reply, request)).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
                    pass

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}" + ("/v1" if self.wire == "openai" else "")

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


WIRES = {
    "openai": {"key": "OPENAI_API_KEY", "base": "OPENAI_BASE_URL", "path": "/v1/chat/completions",
               "model": "gpt-4o-mini", "tokens": (11, 7), "price": (0.15, 0.60)},
    "anthropic": {"key": "ANTHROPIC_API_KEY", "base": "ANTHROPIC_BASE_URL", "path": "/v1/messages",
                  "model": "claude-sonnet-4-test", "tokens": (13, 5), "price": (3.0, 15.0)},
}
FAST = {"retry": {"attempts": 4, "backoff_s": 0.01, "max_wait_s": 5}}
CONVERSATION = [Message(role="system", content="You write Triton kernels."),
                Message(role="user", content="task: rms_norm\nWrite it.")]


def _provider(monkeypatch, wire: str, server: FakeServer, **options):
    spec = WIRES[wire]
    monkeypatch.setenv(spec["key"], "test-key")
    monkeypatch.setenv(spec["base"], server.url)
    return get_provider(f"{wire}:{spec['model']}", **{**FAST, **options})


# Answers -------------------------------------------------------------------------------------

@pytest.mark.parametrize("wire", list(WIRES))
def test_answer_tokens_and_cost(monkeypatch, wire):
    with FakeServer(wire, [Reply(text="Here:\n```python\nx = 1\n```")]) as server:
        completion = _provider(monkeypatch, wire, server).complete(CONVERSATION, seed=3)
    assert completion.text == "Here:\n```python\nx = 1\n```"
    n_in, n_out = WIRES[wire]["tokens"]
    assert (completion.input_tokens, completion.output_tokens) == (n_in, n_out)
    p_in, p_out = WIRES[wire]["price"]
    assert completion.cost_usd == pytest.approx((n_in * p_in + n_out * p_out) / 1e6)
    assert completion.provider == wire and completion.model == WIRES[wire]["model"]
    assert completion.latency_s > 0
    (seen,) = server.seen
    assert seen.path == WIRES[wire]["path"]
    assert seen.body["model"] == WIRES[wire]["model"]
    if wire == "openai":
        assert seen.headers["authorization"] == "Bearer test-key"
        assert seen.body["messages"] == [m.model_dump() for m in CONVERSATION]
        assert seen.body["seed"] == 3
    else:
        # SDK versions send the key as x-api-key or as a bearer token.
        assert "test-key" in (seen.headers.get("x-api-key"), seen.headers.get("authorization", "")[7:])
        assert seen.body["system"] == "You write Triton kernels."
        assert seen.body["messages"] == [{"role": "user", "content": "task: rms_norm\nWrite it."}]
        assert seen.body["max_tokens"] > 0


def test_cost_unknown_for_unpriced_model(monkeypatch):
    with FakeServer("openai", [Reply()]) as server:
        monkeypatch.setenv("OPENAI_API_KEY", "k")
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        completion = get_provider("openai:some-local/llama").complete(CONVERSATION)
    assert completion.cost_usd is None and completion.input_tokens == 11


# Retries -------------------------------------------------------------------------------------

@pytest.mark.parametrize("wire", list(WIRES))
def test_429_retried_after_the_servers_retry_after(monkeypatch, wire):
    # backoff_s=0: without the header there would be no wait at all.
    script = [Reply(429, headers={"retry-after": "0.6"}), Reply(text="done")]
    with FakeServer(wire, script) as server:
        provider = _provider(monkeypatch, wire, server,
                             retry={"attempts": 3, "backoff_s": 0, "max_wait_s": 5})
        completion = provider.complete(CONVERSATION)
    assert completion.text == "done"
    assert len(server.seen) == 2
    assert server.seen[1].at - server.seen[0].at >= 0.55


def test_retry_after_ms_header_is_honoured(monkeypatch):
    script = [Reply(429, headers={"retry-after-ms": "400"}), Reply(text="done")]
    with FakeServer("openai", script) as server:
        provider = _provider(monkeypatch, "openai", server, retry={"attempts": 3, "backoff_s": 0})
        assert provider.complete(CONVERSATION).text == "done"
    assert server.seen[1].at - server.seen[0].at >= 0.35


@pytest.mark.parametrize("wire", list(WIRES))
def test_5xx_retried(monkeypatch, wire):
    script = [Reply(500), Reply(503), Reply(text="third time")]
    with FakeServer(wire, script) as server:
        completion = _provider(monkeypatch, wire, server).complete(CONVERSATION)
    assert completion.text == "third time"
    assert len(server.seen) == 3


@pytest.mark.parametrize("wire", list(WIRES))
@pytest.mark.parametrize("status", [401, 403])
def test_auth_error_not_retried(monkeypatch, wire, status):
    with FakeServer(wire, [Reply(status), Reply(text="never")]) as server:
        provider = _provider(monkeypatch, wire, server)
        with pytest.raises(ProviderError) as info:
            provider.complete(CONVERSATION)
    assert not isinstance(info.value, RetryableError)
    assert len(server.seen) == 1
    message = str(info.value)
    assert "\n" not in message and WIRES[wire]["key"] in message and str(status) in message


@pytest.mark.parametrize("wire", list(WIRES))
def test_bad_request_not_retried(monkeypatch, wire):
    with FakeServer(wire, [Reply(400), Reply(text="never")]) as server:
        with pytest.raises(ProviderError, match="400"):
            _provider(monkeypatch, wire, server).complete(CONVERSATION)
    assert len(server.seen) == 1


def test_gives_up_after_the_policys_attempts(monkeypatch):
    with FakeServer("anthropic", [Reply(529)]) as server:
        provider = _provider(monkeypatch, "anthropic", server, retry={"attempts": 3, "backoff_s": 0.01})
        with pytest.raises(ProviderError, match="gave up after 3 attempts") as info:
            provider.complete(CONVERSATION)
    assert len(server.seen) == 3 and "\n" not in str(info.value)


def test_timeout_retried(monkeypatch):
    script = [Reply(text="too late", delay_s=1.5), Reply(text="in time")]
    with FakeServer("openai", script) as server:
        completion = _provider(monkeypatch, "openai", server, timeout_s=0.3).complete(CONVERSATION)
    assert completion.text == "in time"
    assert len(server.seen) == 2


def test_connection_refused_retried_then_one_line_error(monkeypatch):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
    attempts = []
    provider = get_provider("openai:m", retry={"attempts": 2, "backoff_s": 0.01})
    real_send = provider._send
    provider._send = lambda *a: attempts.append(1) or real_send(*a)
    with pytest.raises(ProviderError, match="cannot reach .*gave up after 2 attempts") as info:
        provider.complete(CONVERSATION)
    assert len(attempts) == 2 and "\n" not in str(info.value)


# Keys ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("wire", list(WIRES))
def test_missing_key_names_the_variable(wire):
    with pytest.raises(MissingKeyError) as info:
        get_provider(f"{wire}:{WIRES[wire]['model']}")
    message = str(info.value)
    assert message.startswith(WIRES[wire]["key"]) and "\n" not in message


# The record of a short run against a loopback server ------------------------------------------

def test_loopback_run_records_every_exchange(monkeypatch, tmp_path):
    answers = ["First:\n```python\ndef rms_norm(x, w, eps):\n    return x\n```", "Second answer", "x"]
    script = [Reply(text=answers[0]), Reply(text=answers[1]), Reply(401)]
    with FakeServer("openai", script) as server:
        monkeypatch.setenv("OPENAI_API_KEY", "k")
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        recorder = ExchangeRecorder(tmp_path / "run")
        provider = recorder.wrap(get_provider("openai:served-model", **FAST), task="rms_norm", role="coder")
        conversations = [CONVERSATION, CONVERSATION + [Message(role="assistant", content=answers[0]),
                                                       Message(role="user", content="Too slow; try again.")]]
        got = [provider.complete(conversations[i], seed=i).text for i in range(2)]
        with pytest.raises(ProviderError):
            provider.complete(conversations[0], seed=2)
    assert got == answers[:2]
    lines = (tmp_path / "run" / "exchanges.jsonl").read_text().splitlines()
    assert len(lines) == 3 == len(server.seen)
    records = read_exchanges(tmp_path / "run")
    for i, (rec, seen) in enumerate(zip(records, server.seen, strict=True)):
        assert rec.n == i and rec.provider == "openai" and rec.model == "served-model"
        assert [m.model_dump() for m in rec.messages] == seen.body["messages"]
        assert rec.seed == seen.body["seed"] == i
        assert rec.meta == {"task": "rms_norm", "role": "coder"}
        assert rec.time
    assert [r.text for r in records[:2]] == answers[:2]
    assert all(r.input_tokens == 11 and r.output_tokens == 7 and r.latency_s > 0 for r in records[:2])
    assert records[2].text is None and "401" in records[2].error
