#!/usr/bin/env bash
# On the GPU machine (device tool), after `VARIANTS="xf=scripts/pending/gemv-tc-x-first.patch" bash
# scripts/device-prepare.sh` here: the tensor-core one-row GEMV (gemv_small_tc; the shared w2 and the indexer's wq_b)
# with x staged before its weight boxes land (MOESERVE_GEMV_TC_X_FIRST=1: released right after the wait; 2: released
# after the boxes, as main), against main's order (0) and main's own binary. The patch's build also stamps every block
# and prints each tc row's timeline ("# timeline" lines). Prints the patch's tests under 1 and 2, the one-row ops'
# medians of three interleaved rounds, the rounds' timelines, and the FP8-expert V4-Flash layer at batch 1
# (device-ab.sh, main against 1); logs under $OUT.
# Usage: bash scripts/device-gemv-tc-x-first.sh --prebuilt .device-bin.tar.xz
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=scripts/prebuilt-env.sh
source scripts/prebuilt-env.sh
device_script_start "--prebuilt DIR|FILE.tar.xz" "$@"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv | tee "$OUT/xf_gpu.txt"
t0=$(date +%s)
for m in 1 2; do
  echo "test_gpu_xf X_FIRST=$m: $(MOESERVE_GEMV_TC_X_FIRST=$m "$BIN/test_gpu_xf" --gtest_brief=1 \
    --gtest_filter='CudaGemm.OneBatchGemvSmallTensorCores:GpuSkinnyPaths.*:GpuDemo.*' 2>&1 |
    grep -E '^\[  (PASSED|FAILED)' | tr '\n' ' ')"
done
for r in 1 2 3; do
  for m in main 0 1 2; do
    if [ $m = main ]; then
      MOESERVE_BENCH_SHAPE="M=1 " "$BIN/bench_gpu_ops" linear >"$OUT/xf_${m}_$r.log" 2>&1
    else
      MOESERVE_GEMV_TC_TIMELINE=1 MOESERVE_GEMV_TC_X_FIRST=$m MOESERVE_BENCH_SHAPE="M=1 " "$BIN/bench_gpu_ops_xf" linear \
        >"$OUT/xf_${m}_$r.log" 2>&1
    fi
  done
  echo "round $r: $(($(date +%s) - t0)) s"
done
python3 - "$OUT" <<'PY'
import glob, statistics, sys
rows = {}
for f in glob.glob(sys.argv[1] + "/xf_*_*.log"):
    m = f.split("/xf_")[1].rsplit("_", 1)[0]
    for line in open(f):
        c = [x.strip() for x in line.split("|")]
        if len(c) > 9 and ("shared w2 M=1" in c[2] or "indexer wq_b M=1" in c[2]) and c[1].startswith(("gemv fp8", "gemv_small tc")):
            rows.setdefault((c[2], c[1]), {}).setdefault(m, []).append(float(c[3]))
ms = ["main", "0", "1", "2"]
print("| shape | op | main | xf 0 (probe) | xf 1 | xf 2 | (us, medians of 3) |")
for (shape, op), d in sorted(rows.items()):
    print(f"| {shape} | {op} | " + " | ".join(
        f"{statistics.median(d[m]):.2f} ({min(d[m]):.2f}-{max(d[m]):.2f})" if m in d else "-" for m in ms) + " |")
PY
for m in 0 1 2; do
  echo "== timelines, X_FIRST=$m, round 3"
  grep -E '^# timeline flash (shared w2|indexer wq_b) M=1 [0-9x]+ \(' "$OUT/xf_${m}_3.log" | cut -c1-420
done
MOESERVE_LAYER_EXPERTS=fp8 MOESERVE_LAYER_BATCHES=1 bash scripts/device-ab.sh --prebuilt "$2" --rounds 3 base \
  xf1@bench_gpu_ops_xf=MOESERVE_GEMV_TC_X_FIRST=1 2>&1 | tail -5
echo "all: $(($(date +%s) - t0)) s"
bash scripts/pack-out.sh
