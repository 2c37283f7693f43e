#!/usr/bin/env bash
# The compression frontier on the embedded model (docs/results.md "Frontier"): every output made with
# the CLI on the CPU protocol (32 × 512 calibration tokens, all 210 wiki test windows of 512), then
# measured by benchmarks/bench_frontier.py against the dense source in the same process.
# Usage: bash benchmarks/frontier.sh [STORE]   (hours on a 2-core CPU; each line can be run alone)
set -euo pipefail
STORE=${1:-runs_frontier}
P=${PY:-python}
JSON=${JSON:-benchmarks/results/cpu_frontier.jsonl}
TMP=$(mktemp -d)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
run_dir() { $P -c 'import json, sys; print(json.load(open(sys.argv[1]))["run_dir"])' "$TMP/$1.json"; }
prune() { local name=$1; shift; $P -m toolkit prune --out "$STORE" --threads 1 --json "$TMP/$name.json" "$@"; }
recover() { $P -m toolkit recover "$(run_dir "$1")" --loss "$2" --json "$TMP/$1-$2.json"; }
point() { $P -m benchmarks.bench_frontier "$(run_dir "$1")" --entry "$2" --family "$3" --json "$JSON"; }

$P -m benchmarks.bench_frontier --dense smollm2-135m --json "$JSON"
prune n20 --model smollm2-135m --method numerical --sparsity structured:20% --save-model
prune n30 --model smollm2-135m --method numerical --sparsity structured:30% --save-model
prune d4 --model smollm2-135m --method depth --sparsity "structured:4 layers" --save-model
prune d8 --model smollm2-135m --method depth --sparsity "structured:8 layers" --save-model
prune gptq --model smollm2-135m --method gptq --quant int4 --save-model
prune awq --model smollm2-135m --method awq --quant int4
prune awp --model smollm2-135m --method awp --quant int4 --save-model
prune n20awq --model "$(run_dir n20)/model" --method awq --quant int4
prune d4gptq --model "$(run_dir d4)/model" --method gptq --quant int4 --save-model
for parent in n20 n30 d4 d8; do recover $parent kd; recover $parent lm; done
point n20 "Numerical 20 %" width;  point n20-kd "Numerical 20 % + KD" width;  point n20-lm "Numerical 20 % + LM" width
point n30 "Numerical 30 %" width;  point n30-kd "Numerical 30 % + KD" width;  point n30-lm "Numerical 30 % + LM" width
point d4 "depth 4 layers" depth;   point d4-kd "depth 4 layers + KD" depth;   point d4-lm "depth 4 layers + LM" depth
point d8 "depth 8 layers" depth;   point d8-kd "depth 8 layers + KD" depth;   point d8-lm "depth 8 layers + LM" depth
point gptq "GPTQ INT4" quant;      point awq "AWQ INT4" quant;                point awp "AWP INT4" quant
point n20awq "Numerical 20 % + AWQ INT4" width+quant
point d4gptq "depth 4 layers + GPTQ INT4" depth+quant
