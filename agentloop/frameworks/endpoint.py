"""Any of our providers as an OpenAI-compatible endpoint on loopback, for frameworks that speak
the OpenAI API (OpenEvolve, an agent SDK, a notebook): `POST /v1/chat/completions` (no
streaming, no tools) and `GET /v1/models`, on 127.0.0.1 only.

`agentloop serve-llm --model PROVIDER:MODEL --port P [--out DIR]` serves a provider and records
every exchange as a run does: `DIR/exchanges.jsonl` (the recorder) and the `exchanges` table of
`DIR/results.sqlite`, with tokens and cost. The `openevolve` style serves the loop's own LLM the
same way (every answer recorded by the loop, counted in its budget).

    from openai import OpenAI
    client = OpenAI(base_url="http://127.0.0.1:8765/v1", api_key="unused")
    client.chat.completions.create(model="any", messages=[{"role": "user", "content": "task: rms_norm"}])
"""

from __future__ import annotations

import errno
import itertools
import json
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import typer

from agentloop.providers import Completion, ExchangeRecorder, Message, Provider, ProviderError, get_provider
from agentloop.providers.base import request_hash, request_meta
from agentloop.results.store import Store

HOST = "127.0.0.1"
Complete = Callable[[list[Message], "int | None"], Completion]
"""What answers a request: the conversation and the request's seed (None when it sent none)."""
Route = Callable[[dict[str, Any]], dict[str, Any]]
"""An extra POST route: the request's JSON in, the answer's JSON out."""


class EndpointError(RuntimeError):
    """The endpoint could not start (one line: the port is taken, say)."""


class RequestError(ValueError):
    """A request the endpoint cannot answer (HTTP 400, its message returned)."""


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise RequestError("only text content parts are supported")
            parts.append(str(part.get("text", "")))
        return "".join(parts)
    if content is None:
        return ""
    raise RequestError("message content must be a string or a list of text parts")


def parse_messages(body: dict[str, Any]) -> list[Message]:
    """A chat-completions request's messages as ours ("developer" counts as "system")."""
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise RequestError("'messages' must be a non-empty list")
    out = []
    for m in raw:
        if not isinstance(m, dict):
            raise RequestError("each message must be an object")
        role = {"developer": "system"}.get(m.get("role"), m.get("role"))
        if role not in ("system", "user", "assistant"):
            raise RequestError(f"message role {m.get('role')!r} is not supported (system, user, assistant)")
        out.append(Message(role=role, content=_text(m.get("content"))))
    return out


def completion_body(c: Completion, model: str, n: int) -> dict[str, Any]:
    return {"id": f"chatcmpl-agentloop-{n}", "object": "chat.completion", "created": int(time.time()),
            "model": c.model or model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": c.text},
                         "finish_reason": "stop", "logprobs": None}],
            "usage": {"prompt_tokens": c.input_tokens, "completion_tokens": c.output_tokens,
                      "total_tokens": c.input_tokens + c.output_tokens}}


class Endpoint:
    """An OpenAI-compatible endpoint on 127.0.0.1 answered by `complete`; `port=0` takes a free
    port. Threads answer requests side by side; `complete` must be thread-safe."""

    def __init__(self, complete: Complete, *, port: int = 0, model: str = "agentloop",
                 routes: dict[str, Route] | None = None) -> None:
        self.complete = complete
        self.model = model
        self.routes = dict(routes or {})
        self._numbers = itertools.count(1)
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
                pass

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _error(self, status: int, message: str, kind: str) -> None:
                self._send(status, {"error": {"message": message, "type": kind, "code": None, "param": None}})

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path.rstrip("/") in ("/v1/models", "/models"):
                    self._send(200, {"object": "list", "data": [
                        {"id": endpoint.model, "object": "model", "created": 0, "owned_by": "agentloop"}]})
                else:
                    self._error(404, f"no route {self.path}", "not_found")

            def do_POST(self) -> None:  # noqa: N802
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                    body = json.loads(self.rfile.read(length) or b"{}")
                    if not isinstance(body, dict):
                        raise RequestError("the request body must be a JSON object")
                except (ValueError, json.JSONDecodeError) as exc:
                    self._error(400, f"invalid request body: {exc}", "invalid_request_error")
                    return
                path = self.path.split("?", 1)[0].rstrip("/")
                try:
                    if path in ("/v1/chat/completions", "/chat/completions"):
                        self._send(200, endpoint.chat(body))
                    elif path in endpoint.routes:
                        self._send(200, endpoint.routes[path](body))
                    else:
                        self._error(404, f"no route {self.path}", "not_found")
                except RequestError as exc:
                    self._error(400, str(exc), "invalid_request_error")
                except ProviderError as exc:
                    self._error(502, str(exc), "provider_error")
                except Exception as exc:  # one request's failure never stops the server
                    self._error(500, f"{type(exc).__name__}: {exc}", "server_error")

        try:
            self.server = ThreadingHTTPServer((HOST, port), Handler)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise EndpointError(f"port {port} on {HOST} is taken; choose another --port") from None
            raise EndpointError(f"cannot listen on {HOST}:{port}: {exc.strerror or exc}") from None
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The base URL an OpenAI client takes (`.../v1`)."""
        return f"http://{HOST}:{self.port}/v1"

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        if body.get("stream"):
            raise RequestError("streaming is not supported; send stream=false")
        if body.get("tools") or body.get("functions"):
            raise RequestError("tools are not supported")
        if int(body.get("n") or 1) != 1:
            raise RequestError("only n=1 is supported")
        seed = body.get("seed")
        if seed is not None and not isinstance(seed, int):
            raise RequestError("'seed' must be an integer")
        messages = parse_messages(body)
        return completion_body(self.complete(messages, seed), str(body.get("model") or self.model),
                               next(self._numbers))

    def start(self) -> Endpoint:
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1},
                                        daemon=True, name=f"endpoint-{self.port}")
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self.server.shutdown()
            self._thread.join(timeout=5)
        self.server.server_close()

    def __enter__(self) -> Endpoint:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


_TASK_LINE = re.compile(r"^\s*task:\s*([A-Za-z0-9_.-]+)\s*$", re.MULTILINE)


class RecordedProvider:
    """A provider answering an endpoint, every exchange recorded as a run records it: in
    `out/exchanges.jsonl` and the `exchanges` table of `out/results.sqlite` (cell "serve-llm",
    the task from the conversation's `task:` line, role "coder"). Thread-safe."""

    def __init__(self, provider: Provider, out: Path | None = None, *, cell: str = "serve-llm") -> None:
        self.provider = provider
        self.cell = cell
        self.recorder = ExchangeRecorder(out) if out is not None else None
        self.store = Store(Path(out) / "results.sqlite") if out is not None else None
        self._lock = threading.Lock()
        self._turns: dict[str, int] = {}
        self.calls = self.input_tokens = self.output_tokens = 0
        self.cost_usd = 0.0

    def __call__(self, messages: list[Message], seed: int | None) -> Completion:
        first_user = next((m.content for m in messages if m.role == "user"), "")
        found = _TASK_LINE.search(first_user) or _TASK_LINE.search("\n".join(m.content for m in messages))
        task = found.group(1) if found else ""
        with self._lock:
            turn = self._turns.get(task, 0)
            self._turns[task] = turn + 1
        meta = {"cell": self.cell, "task": task, "role": "coder", "turn": turn}
        token = request_meta.set(meta)
        try:
            completion = self.provider.complete(messages, seed=seed)
        except ProviderError as exc:
            if self.recorder is not None:
                self.recorder.record(self.provider.name, self.provider.model, messages, seed=seed, meta=meta,
                                     error=str(exc) or type(exc).__name__)
            raise
        finally:
            request_meta.reset(token)
        with self._lock:
            self.calls += 1
            self.input_tokens += completion.input_tokens
            self.output_tokens += completion.output_tokens
            self.cost_usd += completion.cost_usd or 0.0
            if self.store is not None:
                self.store.add_exchange(
                    cell=self.cell, task=task, role="coder", request_hash=request_hash(messages),
                    request=json.dumps([m.model_dump() for m in messages], ensure_ascii=False),
                    response=completion.text, provider=completion.provider, model=completion.model,
                    input_tokens=completion.input_tokens, output_tokens=completion.output_tokens,
                    latency_s=completion.latency_s, cost_usd=completion.cost_usd)
        if self.recorder is not None:
            self.recorder.record(self.provider.name, self.provider.model, messages, seed=seed,
                                 completion=completion, meta=meta)
        return completion

    def totals(self) -> str:
        return (f"{self.calls} exchange{'s' if self.calls != 1 else ''}, {self.input_tokens} input and "
                f"{self.output_tokens} output tokens, ${self.cost_usd:.4f}")

    def close(self) -> None:
        if self.store is not None:
            self.store.close()


def serve_llm(
    model: str = typer.Option(..., "--model", metavar="PROVIDER:MODEL",
                              help="The provider that answers: replay, openai:<model>, anthropic:<model>, "
                                   "exchange:<dir>."),
    port: int = typer.Option(8765, "--port", min=0, max=65535, help="The port on 127.0.0.1 (0: a free one)."),
    out: Path | None = typer.Option(None, "--out", help="Record every exchange in DIR/exchanges.jsonl and "
                                                        "DIR/results.sqlite (default: not recorded)."),
) -> None:
    """Serve a provider as an OpenAI-compatible endpoint on 127.0.0.1 (POST /v1/chat/completions),
    for another agent framework; Ctrl-C stops it."""
    try:
        provider = get_provider(model)
    except ProviderError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if out is not None and out.exists() and not out.is_dir():
        typer.echo(f"error: --out {out} is a file, not a directory", err=True)
        raise typer.Exit(2)
    try:
        endpoint = Endpoint(lambda m, s: backend(m, s), port=port, model=model)
    except EndpointError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    backend = RecordedProvider(provider, out)
    where = f"; exchanges in {out}" if out is not None else ""
    typer.echo(f"serving {model} at {endpoint.url}{where} (Ctrl-C stops)")
    endpoint.start()
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        endpoint.close()
        backend.close()
        typer.echo(f"stopped: {backend.totals()}")
