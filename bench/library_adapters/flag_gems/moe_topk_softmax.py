"""FlagGems' MoE routing topk_softmax (vLLM's signature: outputs passed in), not renormalised."""

import os

import torch

os.environ.setdefault("GEMS_VENDOR", "nvidia")  # else FlagGems probes vendors by running their tools

from flag_gems.fused.topk_softmax import topk_softmax  # noqa: E402


def moe_topk_softmax(gating, topk):
    T = gating.shape[0]
    weights = torch.empty(T, topk, dtype=torch.float32, device=gating.device)
    ids = torch.empty(T, topk, dtype=torch.int32, device=gating.device)
    token_expert = torch.empty(T, topk, dtype=torch.int32, device=gating.device)
    topk_softmax(weights, ids, token_expert, gating, False)
    return weights, ids
