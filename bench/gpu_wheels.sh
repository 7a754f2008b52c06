#!/usr/bin/env bash
# Fetch, here, the wheels the GPU machine lacks (it has torch, triton, typer, rich, jinja2, pyyaml,
# httpx, matplotlib, but no pydantic, LangGraph, LLM SDKs or pytest and no registry), for its Python 3.12.
# Then pass carry=[".whl"] to the device tool and start the command with:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
set -euo pipefail
cd "$(dirname "$0")/.."
PKGS="aiosqlite==0.22.1 annotated-types==0.8.0 anthropic==2.14.0 distro==1.9.0 docstring-parser==0.18.0
httpcore2==2.16.2 httpx2==2.16.2 jiter==0.19.0 jsonpatch==1.48 jsonpointer==3.12 langchain-core==1.8.3
langchain-protocol==0.0.20 langgraph==1.2.24 langgraph-checkpoint==4.3.2 langgraph-checkpoint-sqlite==3.1.2
langgraph-prebuilt==1.1.3 langgraph-sdk==0.4.14 langsmith==0.15.1 openai==3.57.0 opentelemetry-api==1.45.2
orjson==3.13.0 ormsgpack==1.13.1 pydantic==2.14.4 pydantic-core==2.50.5 requests-toolbelt==1.0.0
sniffio==1.3.1 sqlite-vec==0.1.9 tenacity==9.2.1 truststore==0.10.5 typing-inspection==0.4.5
typing-extensions==4.16.0 uuid-utils==0.19.0 websockets==17.4 zstandard==0.25.0
pytest==9.2.0 pytest-timeout==2.4.0 pytest-xdist==3.8.0 execnet==2.1.2 iniconfig==2.3.1 pluggy==1.7.0"
# Triton kernel libraries audited in place by bench/library_audit.py (pure wheels; FlagGems also
# needs SQLAlchemy, fla needs einops; numpy, packaging and PyYAML are on the GPU machine).
PKGS="$PKGS liger-kernel==0.8.5 flag-gems==5.0.2 fla-core==0.6.0 einops==0.8.2 sqlalchemy==2.0.48"
# The model check's real weights and the transformers Llama under an exported set (agentloop[models]).
PKGS="$PKGS safetensors==0.8.0 transformers==5.24.0 huggingface-hub==2.4.0 tokenizers==0.23.3 regex==2026.11.19 tqdm==4.70.1 filelock==4.3.1 fsspec==2026.9.0 hf-xet==1.8.0 click==8.5.1"
# The openevolve style (agentloop[openevolve]) for the four-style campaign.
PKGS="$PKGS openevolve==0.4.1 cloudpickle==3.1.3 dacite==1.9.2 flask==3.1.3 werkzeug==3.1.9 itsdangerous==2.2.0 blinker==1.9.0"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl $PKGS
du -sh .whl
