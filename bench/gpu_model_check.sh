#!/usr/bin/env bash
# The model check on the GPU machine (docs/lab/gpu/model_check/README.md): every kernel set on the
# Llama-shaped and the Mixtral-shaped decoder, and the transformers Llama under an exported set.
# Needs the wheels of bench/gpu_wheels.sh in .whl and the real-model record copied to
# runs/records/refine-h200 (device tool: carry [".whl", "runs/records"]). The logs and JSON go into
# one archive, $OUT/model_check.tgz, after each set (the device tool brings back only a few files).
set -uo pipefail
OUT=${OUT:-runs/model_check}
source "$(dirname "$0")/gpu_env.sh"
R=runs/records/refine-h200
# SETS: names of the sets to check (default all five); every set also served in a serving process.
declare -A SPEC=([eager]=eager [compiled]=compiled [corpus]=corpus [baseline]="baseline=run:$R:baseline"
                 [bi-aware]="bi-aware=run:$R:bi-aware")
for config in ${CONFIGS:-llama-h200 moe-h200}; do
  for name in ${SETS:-eager compiled corpus baseline bi-aware}; do
    timeout "${LIMIT:-240}" python3 bench/model_check.py --config "$config" --device cuda --serving \
      --set "${SPEC[$name]}" --json "$OUT/$config-$name.json" 2>&1 | tee "$OUT/$config-$name.log"
    tar czf "$RESULTS/model_check.tgz" -C "$OUT" .
  done
done
if [ -z "${NO_TRANSFORMERS:-}" ]; then
  timeout 240 python3 -m pytest -q -s -p no:cacheprovider tests/test_transformers_export.py -k gpu 2>&1 \
    | tee "$OUT/transformers.log"
fi
tar czf "$RESULTS/model_check.tgz" -C "$OUT" .
