"""Production baselines of token_logprobs."""

import torch


def log_softmax_gather(logits, token_ids):
    """log_softmax straight to float32 (no float copy of the logits first), then a gather: the
    sampler's path in vLLM."""
    logprobs = torch.log_softmax(logits, dim=-1, dtype=torch.float32)
    return logprobs.gather(1, token_ids.view(-1, 1)).squeeze(1)


def gather_minus_logsumexp(logits, token_ids):
    """The chosen logit minus the row's logsumexp, both in float32: no [T, V] log-probabilities."""
    chosen = logits.gather(1, token_ids.view(-1, 1)).squeeze(1).float()
    return chosen - torch.logsumexp(logits.float(), dim=-1)
