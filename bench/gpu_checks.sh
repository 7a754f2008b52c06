#!/usr/bin/env bash
# The H200 checks the docs rely on, in phases that each fit one device call of at most 10 minutes.
# Results land in $OUT (default ./out); logs are tarred into $OUT/logs-<phase>.tgz.
#
#   bash bench/gpu_checks.sh timing     # harness stability + agreement: default, --cuda-graph and
#                                       # --no-queue-ahead; illegal memory access. First, on an
#                                       # idle GPU                                       (~8 min)
#   bash bench/gpu_checks.sh gates      # dynamic gate over the corpus, 4 groups side by side,
#                                       # and the oracle on chosen candidates            (~6 min)
#   bash bench/gpu_checks.sh campaign   # tasks/campaigns/full.yaml; run again to resume: carry
#                                       # runs/full back (it is tarred to $OUT/full.tgz)
#                                       # (~6-7 min on two H200s, ~9 min on one)
#
# Learned the hard way: timing runs go first on a fresh machine. A candidate that hangs is
# killed after its timeout, and the runs after it on the same machine were noisier (see
# docs/benchmark.md). The corpus measurement (bench/measure_corpus.py, all 72 candidates) does not
# fit one call with the rest; run it alone with --tasks subsets.
set -u
PHASE=${1:?usage: bench/gpu_checks.sh timing|gates|campaign}
OUT=${OUT:-out}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
LOGS=$(mktemp -d)
export PYTHONUNBUFFERED=1 PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD"
{ nvidia-smi --query-gpu=name,driver_version,utilization.gpu,clocks.sm --format=csv,noheader
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
} > "$LOGS/env.txt" 2>&1

case "$PHASE" in
timing)
  timeout 170 python3 bench/harness.py --device cuda --part stability --part agreement \
      --json "$OUT/harness.json" > "$LOGS/harness.log" 2>&1
  timeout 170 python3 bench/harness.py --device cuda --part stability --part agreement --cuda-graph \
      --json "$OUT/harness_graph.json" > "$LOGS/harness_graph.log" 2>&1
  timeout 130 python3 bench/harness.py --device cuda --part stability --part agreement --no-queue-ahead \
      --json "$OUT/harness_no_queue_ahead.json" > "$LOGS/harness_no_queue_ahead.log" 2>&1
  timeout 90 python3 bench/illegal_memory_access.py --device cuda > "$LOGS/ima.log" 2>&1
  ;;
gates)
  i=0
  for group in decode_attention,linear,rms_norm moe_topk_softmax,log_softmax,layer_norm \
               softmax,token_logprobs,per_token_quant_int8 \
               greedy_sample,fused_add_rms_norm,rotary_embedding,silu_and_mul; do
    i=$((i + 1))
    timeout 420 python3 bench/dynamic_gate.py --device cuda --runs 2 --timeout 60 --tasks "$group" \
        --json "$OUT/dynamic_$i.json" > "$LOGS/dynamic_$i.log" 2>&1 &
  done
  timeout 200 python3 bench/vendor_row_bits.py --hidden 4096 > "$LOGS/vendor.log" 2>&1
  timeout 200 python3 bench/measure_corpus.py --device cuda --tasks rms_norm \
      --match library_norm_then_scale --budget 40 --json "$OUT/measure.json" > "$LOGS/measure.log" 2>&1
  wait
  ;;
campaign)
  resume=""; [ -f runs/full/checkpoints.sqlite ] && resume="--resume"
  left=$((540 - SECONDS))
  timeout -s INT -k 20 "$left" python3 -m agentloop run tasks/campaigns/full.yaml --out runs/full $resume \
      > "$LOGS/campaign.log" 2>&1
  echo "exit $? after $SECONDS s" >> "$LOGS/campaign.log"
  tar czf "$OUT/full.tgz" runs/full
  ;;
*)
  echo "unknown phase $PHASE: timing, gates or campaign" >&2; exit 2 ;;
esac
tar czf "$OUT/logs-$PHASE.tgz" -C "$LOGS" .
cat "$LOGS/env.txt"
for f in "$LOGS"/*.log; do echo "== $(basename "$f")"; tail -6 "$f"; done
