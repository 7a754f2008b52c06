#!/usr/bin/env bash
# Fetch, here, Ray and the dependencies the GPU machine lacks, for its Python 3.12 (manylinux
# x86_64), in chunk directories that each fit one device call (64 MiB carried in all): the Ray
# wheel (~79 MB) is cut in two (30 MiB, the rest); .whl-ray2 also holds the small dependencies and the
# wheel's sha256. Run bench/gpu_wheels.sh first (.whl: the project's own dependencies).
#
# Device call 1, carry [".whl", ".whl-ray1"]: stash part 1, install the project's dependencies,
#   run the campaign on the local pool (see docs/scaling.md, "On the H200"):
#   mkdir -p /tmp/rayparts && cp .whl-ray1/* /tmp/rayparts/ && python3 -m pip install -q --no-index \
#     --no-deps --target /tmp/site .whl/*.whl && ...
# Device call 2 (the same machine, still warm), carry [".whl-ray2"]: reassemble and install Ray:
#   cp .whl-ray2/* /tmp/rayparts/ && cd /tmp/rayparts && cat ray.part-00 ray.part-01 > "$(cat ray.name)" && \
#   sha256sum -c ray.sha256 && python3 -m pip install -q --no-index --no-deps --target /tmp/site *.whl
set -euo pipefail
cd "$(dirname "$0")/.."
RAY=${RAY:-ray==2.60.0}
CHUNK=${CHUNK:-30M}   # part 1; part 2 is the rest (~49 MiB) with the dependencies (~5 MiB)
# Ray's dependencies that the GPU machine does not have (it has click, filelock, packaging,
# pyyaml through torch, typer and matplotlib; requests is fetched anyway, it is small).
DEPS="msgpack protobuf jsonschema jsonschema-specifications referencing rpds-py attrs requests urllib3
certifi charset-normalizer idna"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$tmp" "$RAY"
rm -rf .whl-ray1 .whl-ray2 && mkdir -p .whl-ray1 .whl-ray2
wheel=$(ls "$tmp"/ray-*.whl)
name=$(basename "$wheel")
for dep in $DEPS; do
  norm=$(echo "$dep" | tr - _)
  mv "$tmp"/"$norm"-*.whl .whl-ray2/ 2>/dev/null || mv "$tmp"/"$dep"-*.whl .whl-ray2/ 2>/dev/null \
    || echo "note: $dep was not among Ray's dependencies"
done
(cd "$tmp" && sha256sum "$name") > .whl-ray2/ray.sha256
echo "$name" > .whl-ray2/ray.name
bytes=$(numfmt --from=iec "${CHUNK^^}")
head -c "$bytes" "$wheel" > ".whl-ray1/ray.part-00"
tail -c +"$((bytes + 1))" "$wheel" > ".whl-ray2/ray.part-01"
echo "left out (already on the GPU machine): $(cd "$tmp" && ls | grep -v '^ray-' | tr '\n' ' ')"
du -sh .whl-ray1 .whl-ray2 .whl 2>/dev/null || true
ls -la .whl-ray1 .whl-ray2
