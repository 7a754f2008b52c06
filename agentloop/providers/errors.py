"""How a provider call fails: the errors every provider raises and the price table reads, kept
apart so that both `base` and `pricing` import them without importing each other."""

from __future__ import annotations


class ProviderError(RuntimeError):
    """A call that cannot succeed as asked; the message is one line saying what to do."""


class MissingKeyError(ProviderError):
    """The environment variable holding the API key is not set."""


class RetryableError(ProviderError):
    """A transient failure (rate limit, 5xx, timeout, lost connection) worth another attempt."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after
        """Seconds the server asked us to wait, when it said."""
