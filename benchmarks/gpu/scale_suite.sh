#!/usr/bin/env bash
# The scale suite: benchmarks.bench_scale on a Llama-2-7B shape in order of importance, each run under its own time
# limit, so one call of about ten minutes on one GPU gives the figures docs/results.md compares with the goals.
#
#   bash benchmarks/gpu/scale_suite.sh                              # SUITE=full on cuda, about 10 minutes
#   SUITE=quick bash benchmarks/gpu/scale_suite.sh                  # 2-layer versions of every run (~3 minutes)
#   DEVICE=cpu SUITE=smoke PY=.venv/bin/python bash benchmarks/gpu/scale_suite.sh   # the mechanics, any machine
#
# Offline machines: benchmarks/gpu/pack.sh (run where the package index is reachable) puts the wheels a bare CUDA
# image lacks in .gpu/wheels; they are installed here with pip --target, nothing else is fetched.
# Output: $OUT/scale_gpu.jsonl (one bench_scale record a run; copy it to benchmarks/results/ and run
# `python -m benchmarks.results_doc`) and $OUT/suite.log.
set -u
OUT=${OUT:-/tmp/scale_out}; mkdir -p "$OUT"
DEVICE=${DEVICE:-cuda}; SUITE=${SUITE:-full}; PY=${PY:-python3}; WORK=${WORK:-/tmp/scale_work}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 PRUNELAB_CACHE=${PRUNELAB_CACHE:-/tmp/prunelab_cache}
log="$OUT/suite.log"; json="$OUT/scale_gpu.jsonl"
case "$SUITE" in smoke|quick|full) ;; *) echo "error: SUITE must be smoke, quick or full, not '$SUITE'" >&2; exit 2 ;; esac
if [ -d .gpu/wheels ] && [ "$DEVICE" != cpu ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .gpu/wheels/*.whl >>"$log" 2>&1 || { echo "error: installing .gpu/wheels failed (see $log)" | tee -a "$log"; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
{ date; nvidia-smi --query-gpu=name,memory.total --format=csv 2>/dev/null; git log -1 --format='commit %h %s' 2>/dev/null
  "$PY" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__,
'cuda', torch.cuda.is_available())"; } >>"$log" 2>&1
run() {  # run LIMIT_S ARGS...: one bench_scale record under a time limit; a failure is logged and the suite goes on
  local limit=$1; shift
  echo "=== $(date +%T) bench_scale $*" >>"$log"
  timeout "$limit" "$PY" -m benchmarks.bench_scale --device "$DEVICE" --workdir "$WORK" --keep --json "$json" "$@" \
    >>"$log" 2>&1
  echo "rc=$? $(date +%T)" >>"$log"
}
case "$SUITE" in
  smoke)
    run 600 --shape llama-2-7b --layers 1 --nsamples 2 --seqlen 128 --method wanda --save-model ;;
  quick)
    for method in wanda sparsegpt fista thanos awp; do
      run 150 --shape llama-2-7b --layers 2 --nsamples 128 --seqlen 2048 --method "$method"
    done ;;
  full)
    run 200 --shape llama-2-7b --nsamples 128 --seqlen 2048 --method wanda
    run 240 --shape llama-2-7b --nsamples 128 --seqlen 2048 --method sparsegpt
    for method in fista thanos awp; do
      run 100 --shape llama-2-7b --layers 2 --nsamples 128 --seqlen 2048 --method "$method"
    done ;;
esac
echo "suite done $(date +%T)" >>"$log"
tail -n 5 "$log"
