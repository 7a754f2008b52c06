"""The LLM as one loop (one task in one cell) sees it: each role's provider, with every exchange
recorded and no answered request ever asked twice.

Every answer goes into the results store (`exchanges`) before the loop uses it, and into
`RUN_DIR/exchanges.jsonl`. The loop's checkpointed state lists the request hashes it has used
(`LoopState.answered`); a request whose hash the store had answered, before the node began, more
often than the state has used (a node killed after the answer came, before its checkpoint) is
answered from the store instead of the provider. Identical requests are taken as interchangeable
answers (the store keeps no seed), so which of them a resumed run gets back is not checked.

What a request's provider is told about it (`request_meta`: cell, task, role, turn) is the same
in every run of a campaign: nothing in it depends on how fast the loop's threads run.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Mapping

from agentloop.loop.state import Usage
from agentloop.providers import Completion, ExchangeRecorder, Message, Provider, ProviderError, request_hash
from agentloop.providers.base import request_meta
from agentloop.results.store import Store


class AgentLLM:
    """The providers of one loop's roles behind the store; thread-safe."""

    def __init__(self, providers: Mapping[str, Provider], store: Store, recorder: ExchangeRecorder, *,
                 cell: str, task: str, answered: list[str], usage: Usage, max_calls: int | None = None):
        self.providers = providers
        self.store = store
        self.recorder = recorder
        self.cell = cell
        self.task = task
        self.answered = list(answered)
        """Request hashes used so far, this node's included."""
        self.usage = Usage()
        """What this object's calls used (answers taken from the store included)."""
        self.reused = 0
        """Answers taken from the store rather than the provider."""
        self._used = Counter(answered)
        # Each role's answers before this node (the loop's earlier nodes, resumed runs included).
        self._turns = {r["role"]: r["n"] for r in store.query(
            "SELECT role, COUNT(*) AS n FROM exchanges WHERE cell = ? AND task = ? GROUP BY role",
            cell, task)}
        self._asked: Counter[tuple[str, int]] = Counter()
        # Answers this node may take from the store: those stored before it began (by a node
        # killed after them). Not those its own parallel requests store meanwhile: identical
        # requests with other seeds (evolve's first drafts) would get each other's answers, as
        # the threads happen to run.
        self._stored_before = store.query("SELECT COALESCE(MAX(id), 0) AS n FROM exchanges")[0]["n"]
        self._before = usage
        self._max_calls = max_calls
        self._lock = threading.Lock()

    def calls_left(self) -> int | None:
        """LLM calls the budget still allows; None without a limit."""
        if self._max_calls is None:
            return None
        with self._lock:
            return max(0, self._max_calls - self._before.llm_calls - self.usage.llm_calls)

    def provider(self, role: str) -> Provider:
        return self.providers.get(role) or self.providers["coder"]

    def turn(self, role: str, seed: int) -> int:
        """The `turn` of the next request of a role for a seed (`replay:RUN_DIR` matches the
        recorded turn by it): the role's answers before this node, plus those this node asked it
        for the same seed (a team's coder revises its draft). It does not count the round's
        other requests, which run in parallel: it is the same in every run, a lower bound of the
        role's answers before the request (the seed tells a round's requests apart)."""
        with self._lock:
            turn = self._turns.get(role, 0) + self._asked[(role, seed)]
            self._asked[(role, seed)] += 1
        return turn

    def _stored(self, digest: str, occurrence: int) -> Completion | None:
        rows = self.store.query(
            "SELECT * FROM exchanges WHERE cell = ? AND task = ? AND request_hash = ? AND id <= ? "
            "ORDER BY id LIMIT 1 OFFSET ?",
            self.cell, self.task, digest, self._stored_before, occurrence)
        if not rows:
            return None
        r = rows[0]
        return Completion(text=r["response"], input_tokens=r["input_tokens"],
                          output_tokens=r["output_tokens"], latency_s=r["latency_s"], model=r["model"],
                          provider=r["provider"], cost_usd=r["cost_usd"])

    def ask(self, role: str, messages: list[Message], seed: int) -> Completion:
        """The answer to one request: from the store when a killed run already got it, else
        from the role's provider (recorded at once)."""
        digest = request_hash(messages)
        with self._lock:
            occurrence = self._used[digest]
            self._used[digest] += 1
        completion = self._stored(digest, occurrence)
        if completion is not None:
            with self._lock:
                self.reused += 1
        else:
            provider = self.provider(role)
            meta = {"cell": self.cell, "task": self.task, "role": role, "turn": self.turn(role, seed)}
            token = request_meta.set(meta)
            try:
                completion = provider.complete(messages, seed=seed)
            except ProviderError as exc:
                self.recorder.record(provider.name, provider.model, messages, seed=seed, meta=meta,
                                     error=str(exc) or type(exc).__name__)
                raise
            finally:
                request_meta.reset(token)
            # The store first: it is what a resumed run looks answers up in.
            self.store.add_exchange(
                cell=self.cell, task=self.task, role=role, request_hash=digest,
                request=json.dumps([m.model_dump() for m in messages], ensure_ascii=False),
                response=completion.text, provider=completion.provider, model=completion.model,
                input_tokens=completion.input_tokens, output_tokens=completion.output_tokens,
                latency_s=completion.latency_s, cost_usd=completion.cost_usd)
            self.recorder.record(provider.name, provider.model, messages, seed=seed, completion=completion,
                                 meta=meta)
        with self._lock:
            self.answered.append(digest)
            self.usage = self.usage + Usage(llm_calls=1, input_tokens=completion.input_tokens,
                                            output_tokens=completion.output_tokens,
                                            cost_usd=completion.cost_usd or 0.0)
        return completion
