#!/usr/bin/env bash
# The GPU run for converted memory as device memory the library maps itself (native/src/memory/vmm.c):
# the driver's process checkpoint on VMM memory (bench/probes/checkpoint_vmm.py), swapping under a
# real capacity (bench/switching/swap.py --real: a filler outside the library holds the rest of the
# card), then tests/gpu (bench/gpu_validate.sh --tests-only). Results in $OUT.
#
#   bash bench/vmm_validate.sh [--no-tests] [--sizes 8]
#
# GPU safety: every process under the library has VMM-backed allocations (swap.py --real stops if a
# server's are managed memory); the checkpoint probe's children are small (< 1 GiB) and a restored
# child is never killed; each stage runs under a timeout that ends what it started.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$(pwd)/bench/results/vmm-$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
TESTS=1 SIZES=8
while [ $# -gt 0 ]; do
  case "$1" in
    --no-tests) TESTS=0 ;;
    --sizes) SIZES=$2; shift ;;
    *) echo "vmm_validate: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
export OUT
STATUS=0
# install and the GPU tests (gpu_validate.sh installs the package and exports nothing to us: the
# library's path is read back from the installed package)
if [ "$TESTS" = 1 ]; then
  OUT="$OUT/tests" bash bench/gpu_validate.sh --tests-only > "$OUT/gpu-validate.log" 2>&1 || STATUS=1
  tail -n 25 "$OUT/gpu-validate.log"
else
  python3 -m pip install --no-build-isolation --no-deps . > "$OUT/install.log" 2>&1 || { echo "install failed"; exit 1; }
fi
NVSHARE_LIBRARY=$(cd / && python3 -c 'from xpushare.wire.paths import library_path; print(library_path())')
export NVSHARE_LIBRARY
echo "== library: $NVSHARE_LIBRARY"
echo "== checkpoint probe"
timeout --kill-after=10 150 python3 bench/probes/checkpoint_vmm.py --lib "$NVSHARE_LIBRARY" \
  --json "$OUT/checkpoint-vmm.json" 2> "$OUT/checkpoint-vmm.stderr" || STATUS=1
tail -c 1500 "$OUT/checkpoint-vmm.stderr"
echo "== swap under a real capacity"
timeout --kill-after=15 240 python3 -m bench.switching.swap --real --sizes "$SIZES" --requests 6 \
  --json "$OUT/swap-real.json" --logs "$OUT/swap-logs" > "$OUT/swap-real.txt" 2>&1 || STATUS=1
tail -n 20 "$OUT/swap-real.txt"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv > "$OUT/apps-after.txt" 2>&1
# what comes back from the device machine is a few files: the summaries, and everything in one archive
tar czf /tmp/vmm-all.tgz -C "$OUT" . && mkdir -p "$OUT/keep" &&
  cp "$OUT"/checkpoint-vmm.json "$OUT"/swap-real.json "$OUT"/swap-real.txt "$OUT"/gpu-validate.log "$OUT/keep/" 2>/dev/null
find "$OUT" -mindepth 1 -maxdepth 1 ! -name keep -exec rm -rf {} +
mv "$OUT"/keep/* "$OUT"/ 2>/dev/null; rmdir "$OUT/keep"; mv /tmp/vmm-all.tgz "$OUT/all.tgz"
exit "$STATUS"
