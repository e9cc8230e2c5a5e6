#!/usr/bin/env bash
# The one script to run on the GPU machine: install, show versions, run the GPU tests, run the
# benchmark suite, and collect everything in $OUT.
#
#   bash bench/gpu_validate.sh                # all of it (stops by 530 s whatever happens; the
#                                             # benchmarks get what the tests leave, about 380 s)
#   bash bench/gpu_validate.sh --tests-only   # install + tests/gpu
#   bash bench/gpu_validate.sh --bench-only   # install + bench/run_all.py (~470 s of benchmarks)
#   bash bench/gpu_validate.sh --quick        # benchmarks in their quick forms
#
# Environment: OUT (where results go; default bench/results/validate-<time>), PYTHON (the interpreter
# that has torch; default: python3 if it imports torch, else /opt/torch/.venv/bin/python3).
# Writes to $OUT: versions.txt, nvidia-smi.txt, install.log, gpu-tests.log, bench.log, suite.json,
# benchmarks.md and the plots (*.png). Exits non-zero if the install, a test or a benchmark failed.
#
# GPU safety: the tests need 32 GiB free, or 3/4 of a smaller card; the benchmarks 48 GiB (left out
# below that; tests/gpu/README.md). Each process under libnvshare.so sees a virtual capacity
# (NVSHARE_GPU_MEMORY; no real oversubscription), and whatever it started is ended when it stops.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
REPO=$(pwd)
BUDGET_S=530                  # the whole run; the device tool's limit is 600 s a command
BENCH_RESERVE_S=380           # kept for the benchmarks (470 s alone; they share what is left)
TESTS_MIN_FREE_MIB=32768      # 32 GiB, or 3/4 of a smaller card (testkit.gpu.min_free_mib)
BENCH_MIN_FREE_MIB=49152      # 48 GiB for the benchmarks, which move tensors of several GiB
RUN_TESTS=1 RUN_BENCH=1 QUICK=()
for arg in "$@"; do
  case "$arg" in
    --tests-only) RUN_BENCH=0 ;;
    --bench-only) RUN_TESTS=0 ;;
    --quick) QUICK=(--quick) ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "gpu_validate: unknown option $arg (see --help)" >&2; exit 2 ;;
  esac
done

OUT=${OUT:-$REPO/bench/results/validate-$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
log() { echo "== gpu_validate [$(date -u +%H:%M:%S), ${SECONDS}s] $*" | tee -a "$OUT/summary.txt"; }
left() { echo $((BUDGET_S - SECONDS)); }

# Every process this run starts carries this marker in its environment, so that whatever is left
# behind (a test killed by a timeout leaves its GPU programs running) can be found and ended by pid.
XPUSHARE_VALIDATE_RUN="gpu-validate-$$-$(date +%s%N)"
export XPUSHARE_VALIDATE_RUN
run_pids() {  # pids of live processes carrying this run's marker, other than this shell
  local found pid
  found=$(grep -lsz "XPUSHARE_VALIDATE_RUN=$XPUSHARE_VALIDATE_RUN" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3)
  for pid in $found; do  # the grep and cut above carried the marker too: keep only what still lives
    [ "$pid" != "$$" ] && [ -d "/proc/$pid" ] && echo "$pid"
  done
  return 0
}
reap_strays() {
  local pids
  pids=$(run_pids)
  [ -n "$pids" ] || return 0
  log "ending leftover process(es) of this run: $(echo "$pids" | tr '\n' ' ')"
  # shellcheck disable=SC2086  # a list of pids; kill is a builtin, so it starts no marked process
  kill -TERM $pids 2>/dev/null
  sleep 3
  pids=$(run_pids)
  # shellcheck disable=SC2086
  [ -z "$pids" ] || kill -KILL $pids 2>/dev/null
  return 0
}
trap reap_strays EXIT

# --- the interpreter ----------------------------------------------------------------------------
if [ -z "${PYTHON:-}" ]; then
  if python3 -c 'import torch' 2>/dev/null; then PYTHON=$(command -v python3)
  elif [ -x /opt/torch/.venv/bin/python3 ]; then PYTHON=/opt/torch/.venv/bin/python3
  else PYTHON=python3; fi
fi
PATH="$(dirname "$PYTHON"):$PATH"   # its console scripts (nvshare-run, nvsharectl) first
export PATH
log "python: $PYTHON"

# --- GPU safety check ---------------------------------------------------------------------------
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
cat "$OUT/nvidia-smi.txt"
GPU_ID=${CUDA_VISIBLE_DEVICES:-0}
GPU_ID=${GPU_ID%%,*}
MEM=$(nvidia-smi --id="$GPU_ID" --query-gpu=memory.free,memory.total --format=csv,noheader,nounits \
      2>/dev/null | head -n 1 | tr -dc '0-9,')
FREE_MIB=${MEM%%,*} TOTAL_MIB=${MEM##*,}
if [ -n "$TOTAL_MIB" ] && [ $((TOTAL_MIB * 3 / 4)) -lt "$TESTS_MIN_FREE_MIB" ]; then
  TESTS_MIN_FREE_MIB=$((TOTAL_MIB * 3 / 4))
fi
if [ -z "$FREE_MIB" ] || [ "$FREE_MIB" -lt "$TESTS_MIN_FREE_MIB" ]; then
  log "REFUSED: GPU free memory is ${FREE_MIB:-unknown} MiB of ${TOTAL_MIB:-?} (the tests need" \
      "$TESTS_MIN_FREE_MIB): someone else is using it"
  exit 3
fi
if [ "$RUN_BENCH" = 1 ] && [ "$FREE_MIB" -lt "$BENCH_MIN_FREE_MIB" ]; then
  if [ "$RUN_TESTS" = 0 ]; then
    log "REFUSED: GPU free memory is $FREE_MIB MiB (the benchmarks need $BENCH_MIN_FREE_MIB)"
    exit 3
  fi
  log "benchmarks left out: $FREE_MIB MiB free, they need $BENCH_MIN_FREE_MIB; running the tests"
  RUN_BENCH=0
fi

# --- install ------------------------------------------------------------------------------------
log "installing the package (pip install --no-build-isolation --no-deps .)"
if ! timeout 240 "$PYTHON" -m pip install --no-build-isolation --no-deps . > "$OUT/install.log" 2>&1; then
  tail -n 40 "$OUT/install.log"
  log "FAILED: install (see install.log)"
  exit 1
fi
NVSHARE_LIBRARY=$(cd / && "$PYTHON" -c 'from xpushare.wire.paths import library_path; print(library_path())') || {
  log "FAILED: the installed package has no libnvshare.so"; exit 1; }
export NVSHARE_LIBRARY   # the tests and benchmarks use exactly the installed library
log "library: $NVSHARE_LIBRARY"

# --- versions -----------------------------------------------------------------------------------
{
  echo "python: $("$PYTHON" --version 2>&1) ($PYTHON)"
  "$PYTHON" - <<'EOF'
from importlib import metadata
for dist in ("xpushare", "torch", "cupy-cuda13x", "jax", "jaxlib", "jax-cuda13-plugin", "triton", "numpy",
             "pytest", "pytest-timeout", "nvidia-ml-py", "rich", "scikit-build-core"):
    try:
        print(f"{dist}: {metadata.version(dist)}")
    except metadata.PackageNotFoundError:
        print(f"{dist}: not installed")
try:
    import torch
    print(f"torch.version.cuda: {torch.version.cuda}")
except ImportError:
    print("torch: cannot be imported")
EOF
  NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  echo "nvcc: $("$NVCC" --version 2>&1 | tail -n 1)"
  echo "gcc: $(gcc --version 2>&1 | head -n 1)"
  echo "cmake: $(cmake --version 2>&1 | head -n 1)"
  echo "driver: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1)"
  echo "nvshare-run --print-lib: $(nvshare-run --print-lib 2>&1)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null)$(git status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo ' +local changes')"
} > "$OUT/versions.txt" 2>&1
cat "$OUT/versions.txt"

STATUS=0
# --- tests --------------------------------------------------------------------------------------
if [ "$RUN_TESTS" = 1 ]; then
  LIMIT=$(left); [ "$RUN_BENCH" = 1 ] && LIMIT=$((LIMIT - BENCH_RESERVE_S))
  [ "$LIMIT" -gt 360 ] && LIMIT=360
  [ "$LIMIT" -lt 30 ] && LIMIT=30   # never 0: for timeout that means no limit at all
  log "tests/gpu (limit ${LIMIT}s)"
  timeout --kill-after=15 "$LIMIT" "$PYTHON" -m pytest tests/gpu -v -rA -p no:cacheprovider \
    2>&1 | tee "$OUT/gpu-tests.log"
  rc=${PIPESTATUS[0]}
  reap_strays
  log "tests/gpu exit code $rc$([ "$rc" = 124 ] && echo ' (timed out)')"
  [ "$rc" = 0 ] || STATUS=1
  if ! tail -n 1 "$OUT/gpu-tests.log" | grep -q passed; then
    log "FAILED: no GPU test passed (all skipped? see gpu-tests.log)"
    STATUS=1
  fi
fi

# --- benchmarks ---------------------------------------------------------------------------------
if [ "$RUN_BENCH" = 1 ]; then
  LIMIT=$(( $(left) - 25 ))   # room for timeout's --kill-after and the clean-up below
  if [ "$LIMIT" -lt 60 ]; then
    log "SKIPPED: benchmarks (only ${LIMIT}s left)"
    STATUS=1
  else
    BUDGET=$((LIMIT - 15)); [ "$BUDGET" -gt 470 ] && BUDGET=470
    log "bench/run_all.py (budget ${BUDGET}s, limit ${LIMIT}s)"
    # --budget: the benchmarks share it and fit themselves to their shares; results are written
    # after each benchmark, and a SIGTERM from timeout stops the one running and keeps the rest.
    (timeout --kill-after=15 "$LIMIT" "$PYTHON" -m bench.run_all --out "$OUT" \
       --budget "$BUDGET" "${QUICK[@]}") \
      2>&1 | tee "$OUT/bench.log"
    rc=${PIPESTATUS[0]}
    reap_strays
    log "benchmarks exit code $rc$([ "$rc" = 124 ] && echo ' (timed out)')"
    [ "$rc" = 0 ] || STATUS=1
    cp -f docs/benchmarks.md bench/results/suite.json bench/results/*.png "$OUT/" 2>/dev/null
  fi
fi

log "done in ${SECONDS}s, status $STATUS; results in $OUT"
exit "$STATUS"
