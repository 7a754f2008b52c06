# Sourced by the bench/gpu_*.sh scripts that run on the GPU machine, after they set their own
# default for OUT: the repository as the working directory; $RESULTS, the caller's OUT, where the
# archive goes; $OUT, a scratch folder for the logs and JSON that go into it (the device tool
# brings back only a few files); the carried wheels (bench/gpu_wheels.sh) installed into /tmp/site
# and on the path.
cd "$(dirname "$0")/.."
OUT=${OUT:-out}; mkdir -p "$OUT"
RESULTS=$OUT; OUT=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TRITON_INTERPRET=0
