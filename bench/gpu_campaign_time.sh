#!/usr/bin/env bash
# Time tasks/campaigns/full.yaml on the GPU machine, one way per device call (each fits 10 min on
# one H200): the trust boundary's budget (#12: no more than 15% over the same campaign before the
# boundary) and Ray's overhead against the local pool (#14). Carry [".whl", ".whl-ray",
# "runs/old-tree.tgz"] (bench/gpu_wheels.sh, bench/gpu_ray_wheels.sh, and for `old`:
# git archive --format=tar.gz -o runs/old-tree.tgz COMMIT -- agentloop gates tasks pyproject.toml).
#
#   bash bench/gpu_campaign_time.sh old     # the campaign as the tree in runs/old-tree.tgz runs it
#   bash bench/gpu_campaign_time.sh local   # this checkout, local pool
#   bash bench/gpu_campaign_time.sh ray     # this checkout, through a one-node Ray cluster of this
#                                           # machine's GPUs, as many judge workers as the local pool
#   RESUME=1 bash bench/gpu_campaign_time.sh local   # go on with the run the last call left in
#                                           # runs/time-local (the machine kept it: a warm one keeps
#                                           # ignored paths; else carry runs/time-<way>)
#
# The full campaign does not fit one 10-minute call on one H200: run it as LIMIT-second segments,
# the first without RESUME, then with RESUME=1 until run.log says all loops finished; the
# campaign's time is the sum of the segments' "exit ... after N s".
#
# `local` and `ray` leave the production baselines out (eval: production_baselines: false), so all
# three time the same work: candidates against references. Results land in $OUT/<way>/: the
# console log (its last line says how long the command took), summary.json, report.md and
# results.sqlite (stage times per kernel).
set -u
WAY=${1:?usage: bench/gpu_campaign_time.sh old|local|ray}
LIMIT=${LIMIT:-560}
OUT=${OUT:-out}; mkdir -p "$OUT/$WAY"; OUT=$(cd "$OUT/$WAY" && pwd)
HERE=$PWD
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$HERE
{ nvidia-smi --query-gpu=name,driver_version,utilization.gpu,clocks.sm --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
} > "$OUT/env.txt" 2>&1
campaign=runs/full-no-baselines.yaml
cp tasks/campaigns/full.yaml "$campaign" && echo "  production_baselines: false" >> "$campaign"
case "$WAY" in
old)
  rm -rf /tmp/old && mkdir -p /tmp/old && tar xzf runs/old-tree.tgz -C /tmp/old && cd /tmp/old
  export PYTHONPATH=/tmp/site:/tmp/old
  campaign=tasks/campaigns/full.yaml ;;
local) ;;
ray)
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl-ray/*.whl 2>&1 | tail -2
  (cd .whl-ray && sha256sum -c ray-site.sha256) && tar xJf .whl-ray/ray-site.tar.xz -C /tmp/site
  gpus=$(nvidia-smi -L | wc -l)
  python3 -m ray.scripts.scripts start --head --num-gpus="$gpus" --num-cpus=16 \
      --include-dashboard=false --disable-usage-stats > "$OUT/ray_start.log" 2>&1 || tail -5 "$OUT/ray_start.log"
  # as many judge workers as the local pool's (workers: 3), in one actor per GPU
  per=$(( (3 + gpus - 1) / gpus ))
  echo "cluster: {ray: auto, workers_per_actor: $per}" >> "$campaign" ;;
*) echo "unknown way $WAY: old, local or ray" >&2; exit 2 ;;
esac
RUN=$HERE/runs/time-$WAY
if [ "${RESUME:-0}" = 1 ]; then
  [ -f "$RUN/campaign.yaml" ] || { echo "RESUME=1 but no run in $RUN" >&2; exit 2; }
  set -- run --resume --out "$RUN"
else
  rm -rf "$RUN"
  set -- run "$campaign" --out "$RUN"
fi
start=$SECONDS
timeout -s INT -k 20 "$LIMIT" python3 -m agentloop "$@" > "$OUT/run.log" 2>&1
echo "exit $? after $((SECONDS - start)) s" >> "$OUT/run.log"
[ "$WAY" = ray ] && python3 -m ray.scripts.scripts stop > /dev/null 2>&1
cp "$RUN"/{summary.json,report.md,campaign.yaml} "$OUT/" 2>/dev/null
# SQLite's backup, not cp: the results live partly in the write-ahead log until a checkpoint.
python3 -c "import sqlite3, sys; d = sqlite3.connect(sys.argv[2]); sqlite3.connect(sys.argv[1]).backup(d); d.close()" \
    "$RUN"/results.sqlite "$OUT/results.sqlite"
# The run directory itself, when small enough to carry back should the machine not stay warm.
[ "$(du -sm "$RUN" | cut -f1)" -lt 40 ] && tar czf "$OUT/run-dir.tgz" -C "$HERE/runs" "time-$WAY"
cd "$HERE"
cat "$OUT/env.txt"; tail -n 12 "$OUT/run.log"
