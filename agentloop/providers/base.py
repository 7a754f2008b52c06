"""The provider interface: a conversation in, one completion out.

Every provider (`openai:`, `anthropic:`, `replay`, `exchange:`) is a `Provider` whose one method
is `complete(messages, seed=...) -> Completion`. Wire formats, keys and retries stay inside.
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import os
import random
import time
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any, ClassVar, Literal, TypeVar

import tenacity
from pydantic import BaseModel, ConfigDict, Field

from agentloop.providers.errors import MissingKeyError, ProviderError, RetryableError
from agentloop.providers.pricing import cost_usd, load_prices

T = TypeVar("T")


request_meta: ContextVar[dict[str, Any] | None] = ContextVar("request_meta", default=None)
"""Who asks the current request (cell, task, role), set by the loop around each call: providers
that need it read it (`exchange:` writes it into the request file, `replay:RUN_DIR` matches the
recorded turn by it)."""


class Message(BaseModel):
    """One turn of a conversation."""

    model_config = ConfigDict(frozen=True)
    role: Literal["system", "user", "assistant"]
    content: str


class Completion(BaseModel):
    """The answer to one request, with what it cost."""

    text: str
    input_tokens: int = 0
    output_tokens: int = 0
    latency_s: float = 0.0
    """Wall time the caller waited, retries included."""
    model: str
    provider: str
    cost_usd: float | None = None
    """None when the price table has no entry for the model (a local server, say)."""


class RetryPolicy(BaseModel):
    """How often and how long to retry transient failures."""

    model_config = ConfigDict(extra="forbid")
    attempts: int = Field(default=6, ge=1)
    """Total attempts, the first one included."""
    backoff_s: float = Field(default=1.0, ge=0)
    """First wait when the server gives no retry-after; doubles on each retry, with jitter."""
    max_wait_s: float = Field(default=60.0, ge=0)
    """Cap on any one wait, a server's retry-after included."""


def one_line(text: object, limit: int = 200) -> str:
    """Text squeezed onto one line and cut to a length, for error messages."""
    return " ".join(str(text).split())[:limit]


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """The wait a response asks for: `retry-after-ms`, or `retry-after` in seconds or as a date."""
    if not headers:
        return None
    try:
        ms = headers.get("retry-after-ms")
        if ms is not None:
            return max(0.0, float(ms) / 1000)
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return max(0.0, float(value))
        except ValueError:
            when = email.utils.parsedate_to_datetime(value)
            return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):
        return None


def status_error(spec: str, status: int, headers: Mapping[str, str] | None, detail: str,
                 key_var: str) -> ProviderError:
    """The error for an HTTP error status: retryable for 408, 409, 429 and 5xx, final otherwise."""
    detail = one_line(detail)
    if status in (401, 403):
        return ProviderError(f"{spec}: authentication failed ({status}); check {key_var}: {detail}")
    if status == 429:
        return RetryableError(f"{spec}: rate limited (429): {detail}", retry_after_seconds(headers))
    if status in (408, 409) or status >= 500:
        return RetryableError(f"{spec}: server error ({status}): {detail}", retry_after_seconds(headers))
    return ProviderError(f"{spec}: request rejected ({status}): {detail}")


def call_with_retries(fn: Callable[[], T], policy: RetryPolicy,
                      sleep: Callable[[float], None] = time.sleep) -> T:
    """Call fn, retrying RetryableError as the policy says; anything else propagates at once."""
    def wait(state: tenacity.RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, RetryableError) and exc.retry_after is not None:
            return min(exc.retry_after, policy.max_wait_s)
        # Exponential backoff with jitter, so parallel callers do not retry in lockstep.
        exponential = policy.backoff_s * 2 ** (state.attempt_number - 1)
        return min(policy.max_wait_s, exponential + random.uniform(0, policy.backoff_s))

    retrying = tenacity.Retrying(stop=tenacity.stop_after_attempt(policy.attempts), wait=wait,
                                 retry=tenacity.retry_if_exception_type(RetryableError),
                                 reraise=True, sleep=sleep)
    try:
        return retrying(fn)
    except RetryableError as exc:
        raise ProviderError(f"{exc} (gave up after {policy.attempts} attempts)") from exc


def request_hash(messages: list[Message]) -> str:
    """Content hash of a request: what `replay:RUN_DIR` matches recorded exchanges by."""
    payload = json.dumps([[m.role, m.content] for m in messages], ensure_ascii=False,
                         separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()


class ProviderOptions(BaseModel):
    """Options common to every provider; each provider extends them."""

    model_config = ConfigDict(extra="forbid")


class Provider:
    """An LLM (or something acting as one) addressed as `provider:model`."""

    name: ClassVar[str] = ""
    """Short name in the registry, e.g. "openai"."""
    Options: ClassVar[type[ProviderOptions]] = ProviderOptions

    def __init__(self, model: str = "", **options: Any):
        self.model = model
        self.options = self.Options(**options)

    @property
    def spec(self) -> str:
        """The `provider:model` string this provider answers to."""
        return f"{self.name}:{self.model}" if self.model else self.name

    def complete(self, messages: list[Message], *, seed: int | None = None) -> Completion:
        """Answer the conversation with one assistant message."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.spec}>"


def require_env(var: str) -> str:
    """The value of an environment variable holding a key; MissingKeyError naming it if unset."""
    value = os.environ.get(var, "").strip()
    if not value:
        raise MissingKeyError(f"{var} is not set; export {var}=<your key> "
                              "(any non-empty value for a local server that ignores keys)")
    return value


class HTTPOptions(ProviderOptions):
    """Options of the providers that call a model over HTTP."""

    temperature: float | None = None
    """Sampling temperature; None leaves the server's default."""
    max_tokens: int | None = None
    """Cap on output tokens; None leaves the server's default where the API allows it."""
    timeout_s: float = Field(default=300.0, gt=0)
    """Per-attempt HTTP timeout."""
    retry: RetryPolicy = RetryPolicy()
    prices_file: str | None = None
    """YAML price table overriding the defaults (see pricing.py); else $AGENTLOOP_PRICES."""
    extra_body: dict[str, Any] = Field(default_factory=dict)
    """Extra JSON fields for the request body (server-specific parameters)."""


class HTTPProvider(Provider):
    """A provider that calls a remote model: retries, timing and cost around one `_send`."""

    Options: ClassVar[type[ProviderOptions]] = HTTPOptions
    key_var: ClassVar[str] = ""
    """The environment variable holding the API key."""

    def __init__(self, model: str = "", **options: Any):
        if not model:
            raise ProviderError(f"{self.name} needs a model: {self.name}:<model>")
        super().__init__(model, **options)
        self.api_key = require_env(self.key_var)

        self.prices = load_prices(self.options.prices_file)

    def _send(self, messages: list[Message], seed: int | None) -> tuple[str, int, int]:
        """One attempt: (text, input tokens, output tokens); raise RetryableError or ProviderError."""
        raise NotImplementedError

    def complete(self, messages: list[Message], *, seed: int | None = None) -> Completion:

        start = time.perf_counter()
        text, n_in, n_out = call_with_retries(lambda: self._send(messages, seed), self.options.retry)
        return Completion(text=text, input_tokens=n_in, output_tokens=n_out,
                          latency_s=time.perf_counter() - start, model=self.model, provider=self.name,
                          cost_usd=cost_usd(self.model, n_in, n_out, self.prices))
