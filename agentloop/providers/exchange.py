"""`exchange:DIR`: a person or an external agent plays the LLM through files.

For each request the provider writes `DIR/<n>.request.json` (n = 1, 2, ...) and polls for
`DIR/<n>.response.json` until a timeout. See README.md in this folder for the file format.
A request identical (messages and seed) to one already in DIR is not written again: its
response is read, or awaited, so a resumed run never asks twice. One process per DIR.
`waiting` lists the requests waited for now (for `--until-idle` and the progress display) and
`on_wait`, when set, is called with each request file as its wait begins. A response file that
is not a valid response (not JSON, no `text`) is named in one logged warning per content it has,
and the wait goes on for a corrected file.

A relative DIR is the run directory's `DIR` when the campaign runner builds the provider
(`exchange_dir`), so a resumed run, started from anywhere, finds its requests; given to
`get_provider` alone it is relative to the current directory.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentloop.providers.base import (
    Completion,
    Message,
    Provider,
    ProviderError,
    ProviderOptions,
    one_line,
    request_hash,
    request_meta,
)

_NUMBERED = re.compile(r"^(\d+)\.(request|response)\.json$")
log = logging.getLogger("agentloop.exchange")


def exchange_dir(directory: str | Path, run_dir: Path | None = None, *, resumed: bool = False) -> Path:
    """Where the files of `exchange:<directory>` are: a relative directory is inside the run
    directory (the current directory without one), wherever the run is started or resumed from;
    an absolute one is itself. `resumed`: a run started before relative directories were the run
    directory's asked in the current directory; it keeps that folder when the run has none."""
    path = Path(directory).expanduser()
    if path.is_absolute() or run_dir is None:
        return path
    inside = run_dir / path
    if resumed and not inside.exists() and path.is_dir() and any(path.glob("*.request.json")):
        return path.resolve()
    return inside


class ExchangeOptions(ProviderOptions):
    timeout_s: float = Field(default=3600.0, gt=0)
    """How long to wait for a response file."""
    poll_s: float = Field(default=0.25, gt=0)
    """How often to look for it."""


class ExchangeRequest(BaseModel):
    """What `<n>.request.json` holds."""

    n: int
    """The request's number in the directory, from 1."""
    time: str
    """When it was written, ISO 8601 UTC."""
    seed: int | None = None
    """The sampling seed the loop asks for (answer as you like; it is recorded)."""
    request_hash: str
    """Content hash of the messages: identical requests are asked once."""
    respond_with: str
    """The file name to write the answer to, in the same directory."""
    meta: dict[str, Any] = Field(default_factory=dict)
    """Who asks: the loop's `cell` (style/mode/provider), `task` and `role`."""
    messages: list[Message]
    """The conversation to answer, oldest first."""


class ExchangeResponse(BaseModel):
    """What `<n>.response.json` holds; only `text` is required."""

    model_config = ConfigDict(extra="ignore")
    text: str
    input_tokens: int = 0
    output_tokens: int = 0
    model: str | None = None
    """Who answered, for the record (a model name, a person)."""


class MalformedResponse(ValueError):
    """A response file that is there but is not a valid response; the message is one line."""


def read_response(path: Path) -> ExchangeResponse:
    """The response in `path`; OSError when it cannot be read, MalformedResponse (one line
    naming the file and what is wrong) when it is not JSON or not a response."""
    return parse_response(path, path.read_text(encoding="utf-8"))


def parse_response(path: Path, text: str) -> ExchangeResponse:
    """The response file `path` holding `text`; MalformedResponse as `read_response`."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MalformedResponse(f"{path} is not valid JSON ({exc.msg}: line {exc.lineno} "
                                f"column {exc.colno})") from None
    try:
        return ExchangeResponse.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "the file"
        raise MalformedResponse(f"{path} is not a response ({where}: {err['msg']}; "
                                f"expected {{\"text\": \"...\"}})") from None


def response_problem(path: Path) -> str | None:
    """What is wrong with the response file `path`, in one line; None when it is a valid
    response, or is not there (yet)."""
    try:
        read_response(path)
    except MalformedResponse as exc:
        return str(exc)
    except (OSError, UnicodeDecodeError):
        return None
    return None


def _write_atomic(path: Path, data: dict[str, Any]) -> None:
    # Readers must never see half a file: write aside, then rename into place.
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


class ExchangeProvider(Provider):
    """Requests and responses as JSON files in a directory."""

    name = "exchange"
    Options = ExchangeOptions

    def __init__(self, model: str = "", **options: Any):
        if not model:
            raise ProviderError("exchange needs a directory: exchange:<dir>")
        super().__init__(model, **options)
        self.dir = Path(model)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, int | None], deque[int]] = defaultdict(deque)
        self._next = 1
        self.waiting: dict[int, dict[str, Any]] = {}
        """Requests waited for now: number -> the request's meta (cell, task, role)."""
        self.on_wait: Callable[[Path, dict[str, Any]], Any] | None = None
        numbered = sorted((int(m[1]), m[2], p) for p in self.dir.iterdir() if (m := _NUMBERED.match(p.name)))
        for n, kind, path in numbered:
            self._next = max(self._next, n + 1)  # a stray response file is never taken for a new request
            if kind != "request":
                continue
            try:
                old = json.loads(path.read_text(encoding="utf-8"))
                self._pending[(old["request_hash"], old.get("seed"))].append(n)
            except (OSError, ValueError, KeyError, TypeError):
                continue

    def request_path(self, n: int) -> Path:
        return self.dir / f"{n}.request.json"

    def response_path(self, n: int) -> Path:
        return self.dir / f"{n}.response.json"

    def waiting_paths(self) -> list[tuple[Path, dict[str, Any]]]:
        """(response file, request meta) of every request waited for now, in request order."""
        with self._lock:
            return [(self.response_path(n), dict(meta)) for n, meta in sorted(self.waiting.items())]

    def _ask(self, messages: list[Message], seed: int | None, meta: dict[str, Any]) -> int:
        """The number of the request file for this request, writing it when it is new."""
        digest = request_hash(messages)
        with self._lock:
            queue = self._pending.get((digest, seed))
            if queue:
                return queue.popleft()
            n = self._next
            self._next += 1
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        request = ExchangeRequest(n=n, time=now, seed=seed, request_hash=digest,
                                  respond_with=self.response_path(n).name, meta=meta, messages=messages)
        _write_atomic(self.request_path(n), request.model_dump(mode="json"))
        return n

    def complete(self, messages: list[Message], *, seed: int | None = None) -> Completion:
        start = time.perf_counter()
        meta = dict(request_meta.get() or {})
        n = self._ask(messages, seed, meta)
        path = self.response_path(n)
        with self._lock:
            self.waiting[n] = meta
        try:
            if self.on_wait is not None and not path.is_file():
                self.on_wait(path, meta)
            answer = self._wait(path)
        finally:
            with self._lock:
                self.waiting.pop(n, None)
        return Completion(text=answer.text, input_tokens=answer.input_tokens,
                          output_tokens=answer.output_tokens, latency_s=time.perf_counter() - start,
                          model=answer.model or str(self.dir), provider=self.name, cost_usd=0.0)

    def _wait(self, path: Path) -> ExchangeResponse:
        """The response in `path`, once it is there and valid; a malformed one is reported once
        per content it has, and waited past."""
        deadline = time.monotonic() + self.options.timeout_s
        problem = "no file"
        reported: str | None = None
        while True:
            if path.is_file():
                try:
                    text = path.read_text(encoding="utf-8")
                    return parse_response(path, text)
                except MalformedResponse as exc:
                    problem = f"unreadable: {exc}"
                    if text != reported:  # said once per content, not at every poll
                        reported = text
                        log.warning("exchange: %s; waiting for a corrected file", exc)
                except (OSError, UnicodeDecodeError) as exc:  # removed or replaced while read
                    problem = f"unreadable: {one_line(exc, 120)}"
            if time.monotonic() >= deadline:
                raise ProviderError(f"{self.spec}: no answer in {path} after {self.options.timeout_s:g} s "
                                    f"({problem}); write {{\"text\": \"...\"}} there")
            time.sleep(self.options.poll_s)
