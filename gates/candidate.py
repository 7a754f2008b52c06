"""Candidate loading, for trusted tools that run a candidate in their own process on purpose
(tests of the gates, corpus measurement). Evaluations never do: they run candidates in a caged
runner (`gates.judge.client`). The implementation lives on the runner side of the boundary."""

from gates.runner.loader import (  # noqa: F401 - re-exported
    CandidateError,
    LoadedCandidate,
    candidate_entry,
    describe_exception,
    load_candidate,
    restore_torch_global_state,
    torch_global_state,
)
