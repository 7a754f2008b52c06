"""Reference MoE top-k routing in plain PyTorch: float32 softmax, top-k, ties to the lower id."""

import torch


def moe_topk_softmax(gating: torch.Tensor, topk: int) -> tuple[torch.Tensor, torch.Tensor]:
    probs = torch.softmax(gating.float(), dim=-1)
    # A stable descending sort keeps equal probabilities in expert order (lower id first);
    # torch.topk does not promise any order among ties.
    values, ids = torch.sort(probs, dim=-1, descending=True, stable=True)
    return values[:, :topk].contiguous(), ids[:, :topk].to(torch.int32).contiguous()


def make_inputs(dims: dict, dtype: torch.dtype, generator: torch.Generator, device: str) -> dict:
    T, E = dims["T"], dims["E"]
    gating = 1.5 * torch.randn(T, E, generator=generator)
    # Every third token gets an exact tie at its top expert (a copy at a random other id), and
    # every fifth a tie inside its top-k, so the lower-id rule decides the order.
    for t in range(1, T, 3):
        top = int(gating[t].argmax())
        other = int(torch.randint(0, E, (1,), generator=generator))
        if other != top:
            gating[t, other] = gating[t, top]
    for t in range(0, T, 5):
        order = gating[t].argsort(descending=True)
        gating[t, order[4]] = gating[t, order[3]]
    return {"gating": gating.to(dtype).to(device)}
