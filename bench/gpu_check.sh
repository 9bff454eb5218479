#!/usr/bin/env bash
# GPU check of the KV kernels, for a CUDA machine (target: under 5 minutes on one H100/H200-class GPU).
#
#   1. the Triton kernel tests (tests/test_kernels_triton*.py, the slow ones too) compiled for the GPU,
#      not interpreted: TRITON_INTERPRET is unset and the tests pick the CUDA device themselves;
#   2. bench/decode_attention.py --device cuda: dense SDPA vs the Triton sparse + quantized decode, eager
#      and captured as CUDA graphs (--cuda-graph: the GPU time without the host's launch overhead);
#   3. the KV tiers on the GPU: tests/test_kv_device.py (device and pinned host slabs, the prefetch
#      worker's side stream, recall from a device slot, save/resume, CUDA vs CPU logits) and the CUDA
#      slab test, then bench/tiers.py (host<->device bandwidth against raw copies, disk tiers); skipped
#      with SKIP_TIERS=1. They need transformers, cryptography, google-crc32c and redis: when $PY lacks
#      them, wheels from bench/out/gpu_wheels (made by bench/gpu_wheels.sh on a machine with the package
#      index, carried with the tree) go into a venv over $PY's packages, without the index.
#
# Python: $PYTHON if set, else the first of .venv/bin/python, python3, python that has CUDA torch,
# triton, pytest and hypothesis; failing that it builds /tmp/minutia-gpu-venv with pip (needs the package index).
# Results go to $OUT if set (else bench/out/gpu_check): env.txt, pytest.log, junit.xml,
# bench.log, bench/results.{md,json,png}. Exit status: non-zero if the tests or the benchmark failed.
#
#   bash bench/gpu_check.sh
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
RESULTS="${OUT:-bench/out/gpu_check}"
mkdir -p "$RESULTS/bench"
unset TRITON_INTERPRET
export PYTHONUNBUFFERED=1
export MINUTIA_KERNELS=auto
TEST_LIMIT="${TEST_LIMIT:-200}"    # seconds
BENCH_LIMIT="${BENCH_LIMIT:-180}"  # seconds (three warm formats: ~110 s on an H200)
TIERS_LIMIT="${TIERS_LIMIT:-90}"   # seconds, tests and bench of step 3 each

has_stack() {
  "$1" -c 'import torch, triton, pytest, hypothesis; assert torch.cuda.is_available()' >/dev/null 2>&1
}

PY=""
for candidate in "${PYTHON:-}" .venv/bin/python python3 python; do
  [ -n "$candidate" ] || continue
  command -v "$candidate" >/dev/null 2>&1 || continue
  if has_stack "$candidate"; then PY="$candidate"; break; fi
done
if [ -z "$PY" ]; then
  echo "no python with CUDA torch + triton + pytest + hypothesis; building /tmp/minutia-gpu-venv (needs the package index)"
  python3 -m venv /tmp/minutia-gpu-venv || exit 2
  /tmp/minutia-gpu-venv/bin/pip install -q torch==2.14.1 triton pytest hypothesis numpy matplotlib rich || exit 2
  PY=/tmp/minutia-gpu-venv/bin/python
  has_stack "$PY" || { echo "the new venv has no working CUDA torch"; exit 2; }
fi

{
  echo "date: $(date -u +%FT%TZ)"
  echo "python: $PY ($("$PY" -c 'import sys; print(sys.version.split()[0])'))"
  "$PY" -c 'import torch, triton; p = torch.cuda.get_device_properties(0); print(f"torch {torch.__version__}, triton {triton.__version__}, {p.name}, sm_{p.major}{p.minor}, {p.multi_processor_count} SMs, {p.total_memory / 2**30:.0f} GiB")'
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader 2>/dev/null || true
} | tee "$RESULTS/env.txt"

# 1. Kernel tests on the GPU. pytest-xdist (when present) spreads the Triton compilations over workers.
XDIST=()
if "$PY" -c 'import xdist' >/dev/null 2>&1; then XDIST=(-n 8); fi
start=$(date +%s)
timeout "$TEST_LIMIT" "$PY" -m pytest -q -p no:cacheprovider "${XDIST[@]}" tests/test_kernels_triton.py tests/test_kernels_triton_select.py \
  --junitxml="$RESULTS/junit.xml" --durations=10 2>&1 | tee "$RESULTS/pytest.log"
tests_rc=${PIPESTATUS[0]}
echo "kernel tests: exit $tests_rc in $(( $(date +%s) - start )) s" | tee -a "$RESULTS/env.txt"

# 2. The benchmark (all contexts and both model shapes; one GPU step is microseconds).
start=$(date +%s)
timeout "$BENCH_LIMIT" "$PY" bench/decode_attention.py --device cuda --contexts 8K,32K,128K \
  --fractions 1,0.125 --repeats 7 --cuda-graph --out "$RESULTS/bench" 2>&1 | tee "$RESULTS/bench.log"
bench_rc=${PIPESTATUS[0]}
echo "benchmark: exit $bench_rc in $(( $(date +%s) - start )) s" | tee -a "$RESULTS/env.txt"

# 3. The KV tiers on the GPU.
tiers_rc=0
if [ "${SKIP_TIERS:-0}" != 1 ]; then
  KVPY="$PY"
  kv_stack() { "$1" -c 'import transformers, cryptography, google_crc32c, redis, yaml' >/dev/null 2>&1; }
  if ! kv_stack "$KVPY" && [ -d bench/out/gpu_wheels ]; then
    if "$PY" -m venv --system-site-packages /tmp/minutia-gpu-kv >/dev/null 2>&1 \
       && /tmp/minutia-gpu-kv/bin/python -m pip install -q --no-index --find-links bench/out/gpu_wheels \
            transformers cryptography google-crc32c redis pyyaml; then
      KVPY=/tmp/minutia-gpu-kv/bin/python
    fi
  fi
  if kv_stack "$KVPY"; then
    start=$(date +%s)
    timeout "$TIERS_LIMIT" "$KVPY" -m pytest -q -p no:cacheprovider -rs tests/test_kv_device.py \
      tests/test_kv_stores_fast.py::test_cuda_slot_reuse_waits_for_queued_copies \
      --junitxml="$RESULTS/junit_tiers.xml" 2>&1 | tee "$RESULTS/pytest_tiers.log"
    tiers_rc=${PIPESTATUS[0]}
    echo "tier tests: exit $tiers_rc in $(( $(date +%s) - start )) s" | tee -a "$RESULTS/env.txt"
    start=$(date +%s)
    timeout "$TIERS_LIMIT" "$KVPY" bench/tiers.py --mib 64 --meetings 0 --repeat 3 --out "$RESULTS/tiers" \
      2>&1 | tee "$RESULTS/tiers.log"
    rc=${PIPESTATUS[0]}
    echo "tier benchmark: exit $rc in $(( $(date +%s) - start )) s" | tee -a "$RESULTS/env.txt"
    [ "$rc" -eq 0 ] || tiers_rc=$rc
  else
    echo "tier step skipped: no python with transformers, cryptography, google-crc32c, redis (run bench/gpu_wheels.sh and carry bench/out/gpu_wheels)" | tee -a "$RESULTS/env.txt"
  fi
fi

if [ "$tests_rc" -ne 0 ] || [ "$bench_rc" -ne 0 ] || [ "$tiers_rc" -ne 0 ]; then exit 1; fi
exit 0
