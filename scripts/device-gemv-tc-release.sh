#!/usr/bin/env bash
# On the GPU machine (device tool), after `VARIANTS="rel=scripts/pending/gemv-tc-release-after-wait.patch" bash
# scripts/device-prepare.sh` here: where the tensor-core one-row GEMV (gemv_small_tc) should release the next launch.
# main releases after all of the block's column boxes landed and the dependency wait; the patch's
# MOESERVE_GEMV_TC_RELEASE=Q releases after the wait once Q eighths of them landed (0: right after the wait), so at
# most two launches are resident and the next one's copies follow this one's without the launch-and-latency gap.
# Prints the one-row ops' medians of three interleaved rounds (main, Q = 0, 4, 7) and the FP8-expert V4-Flash layer
# at batch 1 (device-ab.sh); logs under $OUT.
# Usage: bash scripts/device-gemv-tc-release.sh --prebuilt .device-bin.tar.xz
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=scripts/prebuilt-env.sh
source scripts/prebuilt-env.sh
device_script_start "--prebuilt DIR|FILE.tar.xz" "$@"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv | tee "$OUT/gpu.txt"
t0=$(date +%s)
for q in 0 4; do
  echo "test_gpu_rel Q=$q: $(MOESERVE_GEMV_TC_RELEASE=$q "$BIN/test_gpu_rel" --gtest_brief=1 \
    --gtest_filter='CudaGemm.OneBatchGemvSmallTensorCores:GpuSkinnyPaths.*:GpuDemo.*' 2>&1 |
    grep -E '^\[  (PASSED|FAILED)' | tr '\n' ' ')"
done
for r in 1 2 3; do
  for q in main 0 4 7; do
    if [ $q = main ]; then
      MOESERVE_BENCH_SHAPE="M=1 " "$BIN/bench_gpu_ops" linear >"$OUT/op_${q}_$r.log" 2>&1
    else
      MOESERVE_GEMV_TC_RELEASE=$q MOESERVE_BENCH_SHAPE="M=1 " "$BIN/bench_gpu_ops_rel" linear >"$OUT/op_${q}_$r.log" 2>&1
    fi
  done
  echo "round $r: $(($(date +%s) - t0)) s"
done
python3 - "$OUT" <<'PY'
import glob, statistics, sys
rows = {}
for f in glob.glob(sys.argv[1] + "/op_*_*.log"):
    q = f.split("/op_")[1].rsplit("_", 1)[0]
    for line in open(f):
        c = [x.strip() for x in line.split("|")]
        if len(c) > 9 and ("shared w2 M=1" in c[2] or "indexer wq_b M=1" in c[2]) and c[1].startswith(("gemv fp8", "gemv_small tc")):
            rows.setdefault((c[2], c[1]), {}).setdefault(q, []).append(float(c[3]))
qs = ["main", "0", "4", "7"]
print("| shape | op | " + " | ".join("main" if q == "main" else "Q=" + q for q in qs) + " | (us, medians) |")
for (shape, op), d in sorted(rows.items()):
    print(f"| {shape} | {op} | " + " | ".join(f"{statistics.median(d[q]):.2f}" if q in d else "-" for q in qs) + " |")
PY
MOESERVE_LAYER_EXPERTS=fp8 MOESERVE_LAYER_BATCHES=1 bash scripts/device-ab.sh --prebuilt "$2" --rounds 3 base \
  q0@bench_gpu_ops_rel=MOESERVE_GEMV_TC_RELEASE=0 q4@bench_gpu_ops_rel=MOESERVE_GEMV_TC_RELEASE=4 2>&1 | tail -6
echo "all: $(($(date +%s) - t0)) s"
bash scripts/pack-out.sh
