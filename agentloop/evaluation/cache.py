"""The worker pool behind the evaluation cache: each stage of a kernel is evaluated once per run
directory, whatever cell or loop asks and across resumed runs.

The cache (the store's `evaluations` table) is keyed by `EvalSettings.key(code hash, task)`,
which covers the settings and a hash of the evaluating code (gates, stage jobs, benchmark), and
holds the outcome of every stage evaluated so far, by stage name; a stage not yet in it is run
in the pool and added. Timeouts are cached like any verdict: within one version of the code and
one set of stage limits, a kernel that hung hangs again. Loops asking for the same kernel at
the same time wait for one another.
"""

from __future__ import annotations

import threading
from collections import defaultdict

from agentloop.evaluation.pool import WorkerPool
from agentloop.evaluation.stages import EvalSettings, Stage, StageOutcome, code_hash
from agentloop.results.store import Store
from gates.contract import Task

_NOT_THE_KERNEL = ("worker failed to start",)
"""Errors that say nothing about the kernel: such outcomes are not cached."""


class CachedEvaluator:
    """`stage(code, task, stage)` through the cache; thread-safe."""

    def __init__(self, pool: WorkerPool, store: Store, settings: EvalSettings) -> None:
        self.pool = pool
        self.store = store
        self.settings = settings
        self.hits = 0
        self.misses = 0
        self._locks: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)
        self._guard = threading.Lock()

    def _lock(self, key: str) -> threading.Lock:
        with self._guard:
            return self._locks[key]

    def stage(self, code: str, task: Task, stage: Stage) -> StageOutcome:
        """The outcome of one stage of one kernel: cached, or evaluated now and cached."""
        digest = code_hash(code)
        key = self.settings.key(digest, task.name)
        with self._lock(key):
            record = self.store.cached_evaluation(key) or {}
            if stage in record:
                with self._guard:
                    self.hits += 1
                return StageOutcome.model_validate(record[stage])
            outcome = self.pool.evaluate_stage(code, task, stage, self.settings)
            with self._guard:
                self.misses += 1
            if not (outcome.error or "").startswith(_NOT_THE_KERNEL):
                record[stage] = outcome.model_dump(mode="json")
                self.store.cache_evaluation(key, digest, task.name, self.settings.device, record)
            return outcome
