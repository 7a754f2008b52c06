"""Production baselines of moe_topk_softmax."""

import torch


def softmax_topk(gating, topk):
    """Softmax over the experts straight to float32, then torch.topk (vLLM's native routing).
    torch.topk leaves the order of equal probabilities open and the task gives ties to the lower
    expert id, so the top-k runs on a key that breaks them: the probability's bits (positive
    floats order as their bit patterns) above the reversed expert id."""
    probs = torch.softmax(gating, dim=-1, dtype=torch.float32)
    experts = probs.shape[-1]
    reversed_id = torch.arange(experts - 1, -1, -1, device=gating.device, dtype=torch.int64)
    key = (probs.view(torch.int32).to(torch.int64) << 16) | reversed_id
    ids = torch.topk(key, topk, dim=-1).indices
    return probs.gather(-1, ids), ids.to(torch.int32)
