#!/usr/bin/env bash
# Fetch, here, Ray and the dependencies the GPU machine lacks, for its Python 3.12 (manylinux
# x86_64), into .whl-ray/, small enough to travel in one device call beside .whl (64 MiB carried
# in all): the Ray wheel (~79 MB) is unpacked without ray/jars (Java workers only, ~34 MB of
# already-compressed jar) and repacked with xz (~28 MB), next to the small dependencies' wheels.
# Run bench/gpu_wheels.sh first (.whl: the project's own dependencies). On the GPU machine,
# carry [".whl", ".whl-ray"]:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl .whl-ray/*.whl && \
#     (cd .whl-ray && sha256sum -c ray-site.sha256) && tar xJf .whl-ray/ray-site.tar.xz -C /tmp/site
#   export PYTHONPATH=/tmp/site:$PWD
#   python3 -m ray.scripts.scripts start --head --num-gpus=1 --include-dashboard=false --disable-usage-stats
# (docs/scaling.md, "On the H200"). Repacking takes about two minutes of one core here.
set -euo pipefail
cd "$(dirname "$0")/.."
RAY=${RAY:-ray==2.60.0}
# Ray's dependencies that the GPU machine does not have (it has click, filelock, packaging,
# pyyaml through torch, typer and matplotlib; requests is fetched anyway, it is small).
DEPS="msgpack protobuf jsonschema jsonschema-specifications referencing rpds-py attrs requests urllib3
certifi charset-normalizer idna"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$tmp" "$RAY"
rm -rf .whl-ray && mkdir -p .whl-ray "$tmp/tree"
for dep in $DEPS; do
  norm=$(echo "$dep" | tr - _)
  mv "$tmp"/"$norm"-*.whl .whl-ray/ 2>/dev/null || mv "$tmp"/"$dep"-*.whl .whl-ray/ 2>/dev/null \
    || echo "note: $dep was not among Ray's dependencies"
done
wheel=$(ls "$tmp"/ray-*.whl)
python3 -m zipfile -e "$wheel" "$tmp/tree"
rm -rf "$tmp/tree/ray/jars"
# zipfile drops the executable bits: Ray's own binaries need them back.
find "$tmp/tree/ray/core/src" -type f -exec chmod +x {} +
tar cf - -C "$tmp/tree" . | xz -9 -T0 > .whl-ray/ray-site.tar.xz
(cd .whl-ray && sha256sum ray-site.tar.xz > ray-site.sha256)
echo "$(basename "$wheel") -> .whl-ray/ray-site.tar.xz ($(du -h .whl-ray/ray-site.tar.xz | cut -f1)); .whl-ray: $(du -sh .whl-ray | cut -f1)"
echo "left out (already on the GPU machine): $(cd "$tmp" && ls | grep -v '^ray-\|^tree$' | tr '\n' ' ')"
