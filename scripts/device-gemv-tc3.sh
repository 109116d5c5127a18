#!/usr/bin/env bash
# On the GPU machine (device tool), after `VARIANTS="tc3=scripts/pending/gemv-tc-three-slots.patch" bash
# scripts/device-prepare.sh` here: the tensor-core one-row GEMV (gemv_small_tc; the shared w2 and the indexer's wq_b)
# as a kernel that fits three blocks an SM (MOESERVE_GEMV_TC3=1: the next launch released before the wait; 2: right
# after it), so that a chain keeps two launches' copies in flight, against main's kernel in the same build and
# main's own binary. Prints the patch's tests under 1 and 2, the one-row ops' medians of three interleaved rounds,
# and the FP8- and MXFP4-expert V4-Flash layers at batch 1 and 8 (device-ab.sh); logs under $OUT.
# Usage: bash scripts/device-gemv-tc3.sh --prebuilt .device-bin.tar.xz
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=scripts/prebuilt-env.sh
source scripts/prebuilt-env.sh
device_script_start "--prebuilt DIR|FILE.tar.xz" "$@"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv | tee "$OUT/tc3_gpu.txt"
t0=$(date +%s)
for m in 1 2; do
  echo "test_gpu_tc3 TC3=$m: $(MOESERVE_GEMV_TC3=$m "$BIN/test_gpu_tc3" --gtest_brief=1 \
    --gtest_filter='CudaGemm.OneBatchGemvSmallTensorCores:GpuSkinnyPaths.*:GpuDemo.*' 2>&1 |
    grep -E '^\[  (PASSED|FAILED)' | tr '\n' ' ')"
done
for r in 1 2 3; do
  for m in main 0 1 2; do
    if [ $m = main ]; then
      MOESERVE_BENCH_SHAPE="M=1 " "$BIN/bench_gpu_ops" linear >"$OUT/tc3_${m}_$r.log" 2>&1
    else
      MOESERVE_GEMV_TC3=$m MOESERVE_BENCH_SHAPE="M=1 " "$BIN/bench_gpu_ops_tc3" linear >"$OUT/tc3_${m}_$r.log" 2>&1
    fi
  done
  echo "round $r: $(($(date +%s) - t0)) s"
done
python3 - "$OUT" <<'PY'
import glob, statistics, sys
rows = {}
for f in glob.glob(sys.argv[1] + "/tc3_*_*.log"):
    m = f.split("/tc3_")[1].rsplit("_", 1)[0]
    for line in open(f):
        c = [x.strip() for x in line.split("|")]
        if len(c) > 9 and ("shared w2 M=1" in c[2] or "indexer wq_b M=1" in c[2]) and c[1].startswith(("gemv fp8", "gemv_small tc")):
            rows.setdefault((c[2], c[1]), {}).setdefault(m, []).append(float(c[3]))
ms = ["main", "0", "1", "2"]
print("| shape | op | main | tc3 build, TC3 unset | TC3=1 | TC3=2 | (us, medians of 3) |")
for (shape, op), d in sorted(rows.items()):
    print(f"| {shape} | {op} | " + " | ".join(
        f"{statistics.median(d[m]):.2f} ({min(d[m]):.2f}-{max(d[m]):.2f})" if m in d else "-" for m in ms) + " |")
PY
MOESERVE_LAYER_EXPERTS=fp8 MOESERVE_LAYER_BATCHES=1,8 bash scripts/device-ab.sh --prebuilt "$2" --rounds 3 base \
  t1@bench_gpu_ops_tc3=MOESERVE_GEMV_TC3=1 t2@bench_gpu_ops_tc3=MOESERVE_GEMV_TC3=2 2>&1 | tail -8
MOESERVE_LAYER_BATCHES=1,8 bash scripts/device-ab.sh --prebuilt "$2" --rounds 3 base \
  t1@bench_gpu_ops_tc3=MOESERVE_GEMV_TC3=1 t2@bench_gpu_ops_tc3=MOESERVE_GEMV_TC3=2 2>&1 | tail -8
echo "all: $(($(date +%s) - t0)) s"
bash scripts/pack-out.sh
