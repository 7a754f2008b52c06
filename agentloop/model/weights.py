"""The model's weights: drawn from a seed, or read from a local directory of safetensors files.

Both paths go through a state dict with the Hugging Face tensor names (Llama:
`model.layers.{i}.self_attn.q_proj.weight`, `...mlp.gate_proj.weight`; Mixtral:
`model.layers.{i}.block_sparse_moe.gate.weight`, `...block_sparse_moe.experts.{j}.w1.weight`
(gate), `w3` (up), `w2` (down)), which `from_state_dict` checks and fuses the way serving engines
do: q, k and v into one qkv projection, gate and up into one gate_up projection.

Llama has no biases but the linear task takes one: every projection gets a zero bias (one per
output width, shared), which adds exact zeros.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from agentloop.model.config import ModelConfig, ModelInputError, load_config


@dataclass
class Expert:
    gate_up: torch.Tensor
    """[2 * intermediate, hidden]: gate rows, then up rows."""
    down: torch.Tensor


@dataclass
class Layer:
    input_norm: torch.Tensor
    qkv: torch.Tensor
    """[(heads + 2 * kv_heads) * head_dim, hidden]: q rows, then k, then v."""
    o_proj: torch.Tensor
    post_norm: torch.Tensor
    mlp: Expert | None = None
    """The dense MLP (Llama)."""
    router: torch.Tensor | None = None
    """[experts, hidden] (Mixtral)."""
    experts: list[Expert] = field(default_factory=list)


@dataclass
class ModelWeights:
    embed: torch.Tensor
    layers: list[Layer]
    norm: torch.Tensor
    lm_head: torch.Tensor
    _zero_bias: dict[int, torch.Tensor] = field(default_factory=dict, repr=False)

    def zero_bias(self, width: int) -> torch.Tensor:
        """The zero bias of a projection with `width` outputs."""
        if width not in self._zero_bias:
            self._zero_bias[width] = torch.zeros(width, dtype=self.embed.dtype, device=self.embed.device)
        return self._zero_bias[width]


def expected_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor a checkpoint of this config must hold, by Hugging Face name, with its shape."""
    H, I, D = config.hidden_size, config.intermediate_size, config.head_size
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (config.vocab_size, H),
                                          "model.norm.weight": (H,)}
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (config.vocab_size, H)
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = (H,)
        shapes[p + "post_attention_layernorm.weight"] = (H,)
        shapes[p + "self_attn.q_proj.weight"] = (config.num_attention_heads * D, H)
        shapes[p + "self_attn.k_proj.weight"] = (config.kv_heads * D, H)
        shapes[p + "self_attn.v_proj.weight"] = (config.kv_heads * D, H)
        shapes[p + "self_attn.o_proj.weight"] = (H, config.num_attention_heads * D)
        if config.is_moe:
            shapes[p + "block_sparse_moe.gate.weight"] = (config.num_local_experts, H)
            for j in range(config.num_local_experts):
                e = f"{p}block_sparse_moe.experts.{j}."
                shapes.update({e + "w1.weight": (I, H), e + "w3.weight": (I, H), e + "w2.weight": (H, I)})
        else:
            shapes.update({p + "mlp.gate_proj.weight": (I, H), p + "mlp.up_proj.weight": (I, H),
                           p + "mlp.down_proj.weight": (H, I)})
    return shapes


def seeded_state_dict(config: ModelConfig, seed: int = 0, device: str = "cpu") -> dict[str, torch.Tensor]:
    """Weights drawn from `seed` with a generator of `device` (so a GPU-sized model is drawn in
    milliseconds; other devices draw other values): projections normal / sqrt(fan_in), which keeps
    activations near unit variance; norm weights 1 + 0.1 * normal; embeddings normal."""
    gen = torch.Generator(device=device).manual_seed(seed)
    tensors = {}
    for name, shape in expected_shapes(config).items():
        w = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
        if name.endswith("norm.weight"):
            w = 1.0 + 0.1 * w
        elif "embed_tokens" not in name:
            w = w / shape[-1] ** 0.5
        tensors[name] = w.to(config.dtype)
    return tensors


def seeded_weights(config: ModelConfig, seed: int = 0, device: str = "cpu") -> ModelWeights:
    return from_state_dict(config, seeded_state_dict(config, seed, device), "seeded weights")


def from_state_dict(config: ModelConfig, tensors: dict[str, torch.Tensor], where: str,
                    device: str | None = None) -> ModelWeights:
    """Check names and shapes against the config, then fuse (ModelInputError, one line)."""
    for name, shape in expected_shapes(config).items():
        if name not in tensors:
            raise ModelInputError(f"{where}: tensor {name!r} is missing (expected shape {list(shape)}); "
                                  f"the checkpoint does not match its config.json")
        if tuple(tensors[name].shape) != shape:
            raise ModelInputError(f"{where}: tensor {name!r} has shape {list(tensors[name].shape)}, "
                                  f"expected {list(shape)} from config.json")

    def get(name: str) -> torch.Tensor:
        t = tensors[name]
        out = t.to(device=device or t.device, dtype=config.dtype).contiguous()
        # A fresh, allocator-aligned copy: safetensors hands out views at arbitrary offsets of
        # the file's buffer, and CPU GEMMs (MKL) round differently for a misaligned weight, so
        # the same weights would give other bits than the seeded ones.
        return out.clone() if out.data_ptr() == t.data_ptr() else out

    def cat(*names: str) -> torch.Tensor:
        return torch.cat([get(n) for n in names], dim=0).contiguous()

    layers = []
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}."
        layer = Layer(input_norm=get(p + "input_layernorm.weight"),
                      qkv=cat(*(f"{p}self_attn.{x}_proj.weight" for x in "qkv")),
                      o_proj=get(p + "self_attn.o_proj.weight"),
                      post_norm=get(p + "post_attention_layernorm.weight"))
        if config.is_moe:
            layer.router = get(p + "block_sparse_moe.gate.weight")
            for j in range(config.num_local_experts):
                e = f"{p}block_sparse_moe.experts.{j}."
                layer.experts.append(Expert(cat(e + "w1.weight", e + "w3.weight"), get(e + "w2.weight")))
        else:
            layer.mlp = Expert(cat(p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"),
                               get(p + "mlp.down_proj.weight"))
        layers.append(layer)
    embed = get("model.embed_tokens.weight")
    lm_head = embed if config.tie_word_embeddings else get("lm_head.weight")
    return ModelWeights(embed=embed, layers=layers, norm=get("model.norm.weight"), lm_head=lm_head)


def load_weights(directory: str | Path, device: str = "cpu") -> tuple[ModelConfig, ModelWeights]:
    """A local model directory: its config.json and every `*.safetensors` file in it."""
    directory = Path(directory)
    config = load_config(directory / "config.json") if directory.is_dir() else load_config(directory)
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise ModelInputError(f"{directory}: no *.safetensors files; put the weights beside config.json")
    try:
        from safetensors import SafetensorError
        from safetensors.torch import load_file
    except ImportError:
        raise ModelInputError("loading weights needs the safetensors package: "
                              "pip install safetensors") from None
    tensors: dict[str, torch.Tensor] = {}
    for f in files:
        try:
            tensors.update(load_file(str(f), device="cpu"))
        except (SafetensorError, OSError) as exc:
            raise ModelInputError(f"{f}: not a readable safetensors file ({exc}); "
                                  f"re-download or re-save it") from None
    return config, from_state_dict(config, tensors, str(directory), device)


def load_model(config: str, device: str, seed: int) -> tuple[ModelConfig, ModelWeights]:
    """(config, weights): a directory with *.safetensors loads real weights; a config file or a
    bundled name gets weights drawn from `seed`."""
    cfg, weights = model_loader(config, device, seed)
    return cfg, weights()


def model_loader(config: str, device: str, seed: int) -> tuple[ModelConfig, Callable[[], ModelWeights]]:
    """`load_model` in two halves: the config, and what gives the weights. Real weights are read
    now, so a directory that does not match is said before anything else runs; weights drawn
    from `seed` are drawn when asked (the model check draws them while the first kernel set's
    runners boot)."""
    path = Path(config)
    if path.is_dir() and any(path.glob("*.safetensors")):
        cfg, weights = load_weights(path, device)
        return cfg, lambda: weights
    cfg = load_config(config)
    return cfg, lambda: seeded_weights(cfg, seed, device)
