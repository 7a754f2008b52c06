#!/usr/bin/env bash
# The GPU checks of issues 26-28 that need no quiet machine, side by side in one device call
# (docs/lab/gpu/open_checks/README.md): the four-style campaign (replay), the hostile suite's
# audit-evasion, forge, watch and GPU cases with the device, the dynamic gate over the corpus
# (verdicts against the measured labels, with the audit hook's frame rule), and the model check of
# the record's baseline kernels (its finder's answer). Timing figures from this call are not
# quoted: the jobs share the GPU. Device tool: carry [".whl", "runs/records"]; every result goes
# into one archive, $OUT/open_checks.tgz (the device tool brings back only a few files), once
# every job has ended (each is bounded by LIMIT seconds: keep it under the call's own limit).
# HOSTILE_K, DYNAMIC_GROUPS and CONFIGS choose the jobs (CONFIGS=" ": no model check); PYTESTS and
# LIBRARY_AUDIT=1 add some.
set -u
source "$(dirname "$0")/gpu_env.sh"
LIMIT=${LIMIT:-520}
sed 's/^device: cpu/device: cuda/' tasks/campaigns/frameworks.yaml > /tmp/frameworks-cuda.yaml
timeout -s INT -k 20 "$LIMIT" python3 -m agentloop run /tmp/frameworks-cuda.yaml --out runs/frameworks \
  > "$OUT/campaign.log" 2>&1 &
HOSTILE_DEVICE=cuda HOSTILE_REPORT=$OUT/hostile.jsonl timeout "$LIMIT" python3 -m pytest -q -n 6 \
  -p no:cacheprovider tests/hostile -k "${HOSTILE_K:-aware_ or forge_ or watch_ or gpu_ or honest}" \
  > "$OUT/hostile.log" 2>&1 &
if [ -n "${PYTESTS:-}" ]; then  # GPU tests of the project's own, e.g. PYTESTS="tests/test_device_arena.py"
  timeout "$LIMIT" python3 -m pytest -q -p no:cacheprovider $PYTESTS > "$OUT/pytests.log" 2>&1 &
fi
if [ -n "${LIBRARY_AUDIT:-}" ]; then  # the library kernels of docs/library_audit.md
  timeout "$LIMIT" python3 bench/library_audit.py --device cuda --json "$OUT/library_audit.json" --jobs 6 \
    --budget $((LIMIT - 140)) --timeout 120 > "$OUT/library_audit.log" 2>&1 &
fi
i=0
for group in ${DYNAMIC_GROUPS:-decode_attention,linear,rms_norm moe_topk_softmax,log_softmax,layer_norm,softmax \
             token_logprobs,per_token_quant_int8,greedy_sample \
             fused_add_rms_norm,rotary_embedding,silu_and_mul}; do
  i=$((i + 1))
  timeout "$LIMIT" python3 bench/dynamic_gate.py --device cuda --runs 1 --timeout 60 --tasks "$group" \
    --json "$OUT/dynamic_$i.json" > "$OUT/dynamic_$i.log" 2>&1 &
done
R=runs/records/refine-h200
for config in ${CONFIGS:-moe-h200 llama-h200}; do
  timeout $((LIMIT - SECONDS)) python3 bench/model_check.py --config "$config" --device cuda \
    --set "baseline=run:$R:baseline" --json "$OUT/$config-baseline.json" > "$OUT/$config-baseline.log" 2>&1
done
wait
[ -d runs/frameworks ] && cp runs/frameworks/summary.json runs/frameworks/report.md runs/frameworks/results.sqlite \
  "$OUT/" 2>/dev/null
tar czf "$RESULTS/open_checks.tgz" -C "$OUT" .
for f in "$OUT"/*.log; do echo "== $f"; tail -n 3 "$f"; done
