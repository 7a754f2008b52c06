"""A model implementation nobody here wrote under an exported kernel set: a Hugging Face
`transformers` LlamaForCausalLM built from a small config (random weights, nothing downloaded)
generates each prompt alone and all of them in one batch, with the exported package's
`set_batch_invariant_mode()` routing its GEMMs (mm, bmm) and softmax to the set's kernels; tokens
and every step's logprobs must agree bit for bit. The prompts have equal lengths: padding would
change the reduction length of the attention GEMMs, which the linear and softmax contracts hold
fixed (only decode_attention's contract covers a padded length). Needs `agentloop[models]`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from agentloop.export.build import export_set  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"

SCRIPT = """
import json, sys
import torch, transformers
import hf_kernels

device = sys.argv[1]
small = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2)
sized = dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=4,
             num_attention_heads=16, num_key_value_heads=4)
config = transformers.LlamaConfig(**(small if device == "cpu" else sized), max_position_embeddings=256)
config._attn_implementation = "eager"
torch.manual_seed(0)
model = transformers.LlamaForCausalLM(config).to(device).eval()
if device != "cpu":
    model = model.to(torch.bfloat16)
prompts = torch.randint(0, config.vocab_size, (4 if device == "cpu" else 8, 5 if device == "cpu" else 16),
                        generator=torch.Generator().manual_seed(1)).to(device)


def generate(ids):
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, do_sample=False,
                         output_logits=True, return_dict_in_generate=True, pad_token_id=0)
    logprobs = torch.stack([torch.log_softmax(l.float(), -1) for l in out.logits], 1)  # [B, steps, V]
    return out.sequences[:, ids.shape[1]:], logprobs


def compare():
    with torch.inference_mode():
        alone = [generate(prompts[i:i + 1]) for i in range(prompts.shape[0])]
        tokens, logprobs = generate(prompts)
    return {"tokens_equal": [bool(torch.equal(tokens[i], alone[i][0][0])) for i in range(len(alone))],
            "logprobs_equal": [bool(torch.equal(logprobs[i], alone[i][1][0])) for i in range(len(alone))],
            "max_diff": max(float((logprobs[i] - alone[i][1][0]).abs().max()) for i in range(len(alone)))}


eager = compare()
with hf_kernels.set_batch_invariant_mode(device_type=device):
    routed = compare()
print(json.dumps({"eager": eager, "exported": routed, "routed": hf_kernels.ROUTED}))
"""


def run_llama(package_dir: Path, device: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(package_dir), "TRITON_INTERPRET": "1" if device == "cpu" else "0"}
    done = subprocess.run([sys.executable, "-c", SCRIPT, device], env=env, capture_output=True, text=True,
                          timeout=600, cwd=package_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_exported_mode_makes_a_transformers_llama_reproducible_on_the_cpu(tmp_path):
    spec = f"files:linear={FIXTURES / 'linear' / 'row_sum.py'}"
    export_set(spec, tmp_path, "hf_kernels", device="cpu", tasks=["linear"])
    found = run_llama(tmp_path, "cpu")
    assert found["routed"] == ["aten::mm", "aten::addmm", "aten::bmm"]
    assert all(found["exported"]["tokens_equal"]) and all(found["exported"]["logprobs_equal"]), found


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a GPU")
def test_on_a_gpu_the_exported_corpus_makes_the_llama_reproducible_where_eager_is_not(tmp_path):
    export_set("corpus", tmp_path, "hf_kernels", device="cuda", tasks=["linear", "softmax", "log_softmax"])
    found = run_llama(tmp_path, "cuda")
    print(json.dumps(found))
    assert all(found["exported"]["tokens_equal"]) and all(found["exported"]["logprobs_equal"]), found
