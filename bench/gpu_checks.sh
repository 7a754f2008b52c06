#!/usr/bin/env bash
# The GPU checks of issues 2, 4 and 5 in one run on the H200 (results land in $OUT, default ./out).
#   bash bench/gpu_checks.sh
# Phase A measures the corpus (bench/measure_corpus.py, the independent oracle) and runs the dynamic
# gate over the corpus side by side (BI checks, not timings); phase B runs the timing-sensitive
# checks alone: the illegal-memory-access pool check and the benchmark's stability/agreement.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/env.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >> "$OUT/env.txt"
timeout 270 python3 bench/measure_corpus.py --device cuda --jobs 6 --write --json "$OUT/measure.json" \
    > "$OUT/measure.log" 2>&1 &
timeout 270 python3 bench/dynamic_gate.py --device cuda --runs 2 --json "$OUT/dynamic.json" \
    > "$OUT/dynamic.log" 2>&1 &
wait
tar cf "$OUT/manifests.tar" tasks/*/candidates/manifest.yaml docs/corpus.md
timeout 45 python3 bench/illegal_memory_access.py --device cuda > "$OUT/ima.log" 2>&1
timeout 90 python3 bench/harness.py --device cuda --part stability --json "$OUT/stability.json" \
    > "$OUT/harness.log" 2>&1
cat "$OUT/env.txt"; tail -25 "$OUT/measure.log"; tail -8 "$OUT/dynamic.log"; tail -4 "$OUT/ima.log"; tail -15 "$OUT/harness.log"
