"""The model's configuration: the subset of a Hugging Face `config.json` the model check supports.

Two architectures: Llama (`LlamaForCausalLM`, model_type "llama") and the Mixtral convention for
mixture-of-experts (`MixtralForCausalLM`, model_type "mixtral": `num_local_experts` experts per
layer, `num_experts_per_tok` of them per token, top-k weights renormalised to sum to one).
Keys outside the subset (rope_scaling, attention_bias, sliding_window, ...) are ignored: the check
asks whether a request's tokens depend on its batch neighbours, not whether they match the
published model bit for bit.

One agentloop key, `agentloop_int8_activations` (default false): when true, the input of every
projection but the router and lm_head goes through the per_token_quant_int8 task and is
dequantised (q * scale, per row) before the linear task multiplies it: the activation rounding
of W8A8 serving, on the float GEMM the linear task defines.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, model_validator

CONFIGS_DIR = Path(__file__).resolve().parent / "configs"

SUPPORTED = {"LlamaForCausalLM": "llama", "MixtralForCausalLM": "mixtral"}
"""Architecture -> its model_type."""

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}


class ModelInputError(ValueError):
    """A model config, weights file or directory that cannot be used; the message is one line
    saying what is wrong and what to do."""


class ModelConfig(BaseModel):
    """The supported subset of a Hugging Face config.json."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    architectures: list[str] = Field(default_factory=list)
    model_type: str = "llama"
    hidden_size: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    num_hidden_layers: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_key_value_heads: int | None = Field(default=None, gt=0)
    """Default: num_attention_heads (multi-head attention)."""
    head_dim: int | None = Field(default=None, gt=0)
    """Default: hidden_size // num_attention_heads."""
    vocab_size: int = Field(gt=1)
    rms_norm_eps: float = Field(default=1e-6, gt=0)
    rope_theta: float = Field(default=10000.0, gt=0)
    max_position_embeddings: int = Field(default=2048, gt=0)
    tie_word_embeddings: bool = False
    torch_dtype: Literal["bfloat16", "float32", "float16"] = Field(
        default="bfloat16", validation_alias=AliasChoices("torch_dtype", "dtype"))
    num_local_experts: int | None = Field(default=None, gt=0)
    num_experts_per_tok: int | None = Field(default=None, gt=0)
    agentloop_int8_activations: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> ModelConfig:
        if self.num_attention_heads % self.kv_heads:
            raise ValueError(f"num_attention_heads {self.num_attention_heads} is not a multiple of "
                             f"num_key_value_heads {self.kv_heads}")
        if self.head_size % 2:
            raise ValueError(f"head_dim {self.head_size} must be even (rotary pairs)")
        if self.model_type == "mixtral":
            if not self.num_local_experts or not self.num_experts_per_tok:
                raise ValueError("a mixtral config needs num_local_experts and num_experts_per_tok")
            if self.num_experts_per_tok > self.num_local_experts:
                raise ValueError(f"num_experts_per_tok {self.num_experts_per_tok} exceeds "
                                 f"num_local_experts {self.num_local_experts}")
        return self

    @property
    def kv_heads(self) -> int:
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def head_size(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def is_moe(self) -> bool:
        return self.model_type == "mixtral"

    @property
    def dtype(self) -> torch.dtype:
        return DTYPES[self.torch_dtype]

    def summary(self) -> str:
        """One line for reports: architecture and sizes."""
        moe = (f", {self.num_local_experts} experts top-{self.num_experts_per_tok}" if self.is_moe
               else "")
        int8 = ", int8 activations" if self.agentloop_int8_activations else ""
        return (f"{self.model_type}: {self.num_hidden_layers} layers, hidden {self.hidden_size}, "
                f"{self.num_attention_heads}/{self.kv_heads} heads of {self.head_size}, "
                f"intermediate {self.intermediate_size}, vocab {self.vocab_size}{moe}, "
                f"{self.torch_dtype}{int8}")


def parse_config(raw: dict[str, Any], where: str = "config") -> ModelConfig:
    """A ModelConfig from a config.json mapping; ModelInputError (one line) if it is unsupported."""
    if not isinstance(raw, dict):
        raise ModelInputError(f"{where}: expected a JSON object, found {type(raw).__name__}")
    known = ", ".join(f"{a} (model_type {t!r})" for a, t in SUPPORTED.items())
    archs = raw.get("architectures") or []
    unknown = [a for a in archs if a not in SUPPORTED]
    model_type = raw.get("model_type", SUPPORTED.get(archs[0]) if archs else None)
    if unknown or model_type not in SUPPORTED.values():
        what = f"architecture {unknown[0]!r}" if unknown else f"model_type {model_type!r}"
        raise ModelInputError(f"{where}: {what} is not supported; use a config of {known}")
    if archs and SUPPORTED[archs[0]] != model_type:
        raise ModelInputError(f"{where}: architecture {archs[0]!r} does not match model_type "
                              f"{model_type!r}; set model_type to {SUPPORTED[archs[0]]!r}")
    try:
        return ModelConfig.model_validate({**raw, "model_type": model_type})
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "config"
        message = err["msg"].removeprefix("Value error, ")
        raise ModelInputError(f"{where}: {field}: {message}; fix config.json") from None


def load_config(path: str | Path) -> ModelConfig:
    """A config.json file (or a directory holding one), or the name of a bundled config."""
    path = Path(path)
    if not path.exists() and (CONFIGS_DIR / f"{path.name}.json").is_file():
        path = CONFIGS_DIR / f"{path.name}.json"
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        bundled = ", ".join(bundled_configs())
        raise ModelInputError(f"{path}: no such config file; give a config.json, a model directory "
                              f"or a bundled config ({bundled})")
    try:
        raw = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelInputError(f"{path}: not readable JSON ({exc}); fix or replace the file") from None
    return parse_config(raw, str(path))


def bundled_configs() -> list[str]:
    """Names of the configs shipped in agentloop/model/configs."""
    return sorted(p.stem for p in CONFIGS_DIR.glob("*.json"))
