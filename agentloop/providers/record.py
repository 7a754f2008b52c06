"""The record of every LLM exchange of a run: `RUN_DIR/exchanges.jsonl`, one JSON object a line.

Each line is an `ExchangeRecord` (request messages, seed, response text or error, tokens,
latency, cost, provider/model, time, and free-form `meta` such as task and role). Lines are
appended and flushed one call at a time, so a killed run keeps every answered exchange;
`replay:RUN_DIR` replays them, and `RecordingProvider(reuse=True)` answers a resumed run's
repeated requests from them instead of asking the model again.
"""

from __future__ import annotations

import threading
from collections import defaultdict, deque
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from agentloop.providers.base import Completion, Message, Provider, ProviderError, request_hash

EXCHANGES_FILE = "exchanges.jsonl"


class ExchangeRecord(BaseModel):
    """One request and its answer (or the error that ended it)."""

    n: int
    """Position in the run's record, from 0."""
    time: str
    """When the answer came, ISO 8601 UTC."""
    provider: str
    model: str
    seed: int | None = None
    request_hash: str
    messages: list[Message]
    text: str | None = None
    """The answer; None when the call failed."""
    error: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    latency_s: float = 0.0
    cost_usd: float | None = None
    meta: dict[str, Any] = Field(default_factory=dict)

    def completion(self) -> Completion:
        assert self.text is not None
        return Completion(text=self.text, input_tokens=self.input_tokens, output_tokens=self.output_tokens,
                          latency_s=self.latency_s, model=self.model, provider=self.provider,
                          cost_usd=self.cost_usd)


def read_exchanges(run_dir: str | Path) -> list[ExchangeRecord]:
    """The records of a run; a line cut short by a killed process (the last one) is skipped."""
    path = Path(run_dir) / EXCHANGES_FILE
    if not path.is_file():
        raise ProviderError(f"no exchange record {path}; is {run_dir} a run directory?")
    records: list[ExchangeRecord] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(ExchangeRecord.model_validate_json(line))
        except ValidationError:
            if i == len(lines) - 1:
                break
            raise ProviderError(f"{path}:{i + 1}: not an exchange record") from None
    return records


class ExchangeRecorder:
    """Appends exchanges to `RUN_DIR/exchanges.jsonl`, flushed per call; safe across threads."""

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / EXCHANGES_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        existing = read_exchanges(run_dir) if self.path.is_file() else []
        self._next = 1 + max((r.n for r in existing), default=-1)
        self._unclaimed: dict[tuple, deque[ExchangeRecord]] = defaultdict(deque)
        for rec in existing:
            if rec.text is not None:
                self._unclaimed[(rec.provider, rec.model, rec.seed, rec.request_hash)].append(rec)
        self._drop_cut_line()

    def _drop_cut_line(self) -> None:
        """Truncate a last line left unfinished by a killed run, so appends start on a fresh line."""
        if not self.path.is_file():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            with self.path.open("r+b") as f:
                f.truncate(data.rfind(b"\n") + 1)

    def records(self) -> list[ExchangeRecord]:
        return read_exchanges(self.path.parent)

    def claim(self, provider: str, model: str, messages: list[Message],
              seed: int | None) -> ExchangeRecord | None:
        """An answer recorded before this recorder opened the file for the same request, if one
        is left; each recorded answer is handed out once, identical requests in record order."""
        with self._lock:
            queue = self._unclaimed.get((provider, model, seed, request_hash(messages)))
            return queue.popleft() if queue else None

    def record(self, provider: str, model: str, messages: list[Message], *, seed: int | None = None,
               completion: Completion | None = None, error: str | None = None,
               meta: dict[str, Any] | None = None) -> ExchangeRecord:
        """Append one exchange: an answer (completion) or a failure (error)."""
        with self._lock:
            rec = ExchangeRecord(
                n=self._next, time=datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
                provider=provider, model=model, seed=seed, request_hash=request_hash(messages),
                messages=messages, text=completion.text if completion else None, error=error,
                input_tokens=completion.input_tokens if completion else 0,
                output_tokens=completion.output_tokens if completion else 0,
                latency_s=completion.latency_s if completion else 0.0,
                cost_usd=completion.cost_usd if completion else None, meta=meta or {})
            with self.path.open("a", encoding="utf-8") as f:
                f.write(rec.model_dump_json() + "\n")
                f.flush()
            self._next += 1
            return rec

    def wrap(self, provider: Provider, *, reuse: bool = False, **meta: Any) -> RecordingProvider:
        """`provider` with every exchange recorded here, tagged with meta (task, role, ...)."""
        return RecordingProvider(provider, self, reuse=reuse, meta=meta)


class RecordingProvider(Provider):
    """Records every exchange of an inner provider.

    With reuse=True, a request already answered in the record (same provider, model, seed and
    messages; the k-th identical request gets the k-th recorded answer) is answered from it
    without calling the model: a resumed run never pays twice for an answered call.
    """

    def __init__(self, inner: Provider, recorder: ExchangeRecorder, *, reuse: bool = False,
                 meta: dict[str, Any] | None = None):
        self.inner = inner
        self.recorder = recorder
        self.meta = meta or {}
        self.reuse = reuse
        self.name = inner.name
        self.model = inner.model

    @property
    def spec(self) -> str:
        return self.inner.spec

    def complete(self, messages: list[Message], *, seed: int | None = None) -> Completion:
        if self.reuse:
            recorded = self.recorder.claim(self.inner.name, self.inner.model, messages, seed)
            if recorded is not None:
                return recorded.completion()
        try:
            completion = self.inner.complete(messages, seed=seed)
        except ProviderError as exc:
            self.recorder.record(self.inner.name, self.inner.model, messages, seed=seed, meta=self.meta,
                                 error=str(exc) or type(exc).__name__)
            raise
        self.recorder.record(self.inner.name, self.inner.model, messages, seed=seed,
                             completion=completion, meta=self.meta)
        return completion

