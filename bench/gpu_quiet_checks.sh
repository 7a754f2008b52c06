#!/usr/bin/env bash
# The GPU figures that need the machine to itself, one after the other in one device call
# (docs/lab/gpu/model_check/README.md): a caged call's cost (bench/runner_call.py), the model
# check's wall time per kernel set with its finder on the Llama decoder, and every set's tokens/s
# in its serving process (the end-to-end batch-invariance tax). Device tool: carry [".whl",
# "runs/records"]; the results go into one archive, $OUT/quiet_checks.tgz, after each step (the
# device tool brings back only a few files). Each step is bounded by STEP seconds and none starts
# once LIMIT seconds have passed. CONFIG (llama-h200), SETS (checked), SERVED (served only) and
# RUNNER_CALL=0 choose the steps.
set -u
source "$(dirname "$0")/gpu_env.sh"
LIMIT=${LIMIT:-540}; STEP=${STEP:-200}
R=runs/records/refine-h200
CONFIG=${CONFIG:-llama-h200}
step() {  # step NAME COMMAND...: run it with its log in the archive, unless the time is spent
  local name=$1; shift
  local left=$((LIMIT - SECONDS))
  if [ "$left" -lt 20 ]; then echo "== $name: not started, $SECONDS s spent" | tee -a "$OUT/skipped.log"; return; fi
  [ "$left" -gt "$STEP" ] && left=$STEP
  local t0=$SECONDS
  timeout -k 10 "$left" "$@" > "$OUT/$name.log" 2>&1
  echo "== $name: rc $? in $((SECONDS - t0)) s" | tee -a "$OUT/steps.log"
  tail -n 12 "$OUT/$name.log"
  tar czf "$RESULTS/quiet_checks.tgz" -C "$OUT" .
}
nvidia-smi --query-gpu=name,memory.used,utilization.gpu --format=csv > "$OUT/gpu.txt" 2>&1
[ "${RUNNER_CALL:-1}" = 1 ] && step runner_call python3 bench/runner_call.py --device cuda --json "$OUT/runner_call.json"
for name in ${SETS:-corpus baseline}; do
  case $name in
    corpus|eager|compiled) spec=$name ;;
    *) spec="$name=run:$R:$name" ;;
  esac
  step "check-$CONFIG-$name" python3 bench/model_check.py --config "$CONFIG" --device cuda --set "$spec" \
    --json "$OUT/check-$CONFIG-$name.json"
done
served=()
for name in ${SERVED:-eager compiled corpus bi-aware baseline}; do
  case $name in
    corpus|eager|compiled) served+=(--set "$name") ;;
    *) served+=(--set "$name=run:$R:$name") ;;
  esac
done
[ ${#served[@]} -gt 0 ] && step "served-$CONFIG" python3 bench/model_check.py --config "$CONFIG" --device cuda --served-only "${served[@]}" \
  --json "$OUT/served-$CONFIG.json"
tar czf "$RESULTS/quiet_checks.tgz" -C "$OUT" .
