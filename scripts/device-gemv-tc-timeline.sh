#!/usr/bin/env bash
# On the GPU machine (device tool), after `VARIANTS="tl=scripts/pending/gemv-tc-timeline.patch" bash
# scripts/device-prepare.sh` here: where a chain of tensor-core one-row GEMV launches (gemv_small_tc: the shared w2
# and the indexer's wq_b at one row, as bench_gpu_ops times them) spends its period. The patch's build stamps every
# block (SM, entry, boxes landed, wait returned, end) and prints each row's summary ("# timeline" lines): main's
# release (after the wait and the boxes) and MOESERVE_GEMV_TC_EARLY=1 (released as soon as every block is in), with
# main's own binary beside them for the probe's cost. Two interleaved rounds; raw records in $OUT/tl_*.csv.
# Usage: bash scripts/device-gemv-tc-timeline.sh --prebuilt .device-bin.tar.xz
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=scripts/prebuilt-env.sh
source scripts/prebuilt-env.sh
device_script_start "--prebuilt DIR|FILE.tar.xz" "$@"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv | tee "$OUT/tl_gpu.txt"
t0=$(date +%s)
for r in 1 2; do
  for shape in "flash shared w2 M=1 " "flash indexer wq_b M=1 "; do
    tag=$(echo "$shape" | tr -c 'A-Za-z0-9\n' '_' | sed 's/_*$//')
    MOESERVE_BENCH_SHAPE="$shape" "$BIN/bench_gpu_ops" linear >"$OUT/tl_main_${tag}_$r.log" 2>&1
    MOESERVE_GEMV_TC_TIMELINE=$OUT/tl_late_$tag.csv MOESERVE_BENCH_SHAPE="$shape" "$BIN/bench_gpu_ops_tl" linear \
      >"$OUT/tl_late_${tag}_$r.log" 2>&1
    MOESERVE_GEMV_TC_EARLY=1 MOESERVE_GEMV_TC_TIMELINE=$OUT/tl_early_$tag.csv MOESERVE_BENCH_SHAPE="$shape" \
      "$BIN/bench_gpu_ops_tl" linear >"$OUT/tl_early_${tag}_$r.log" 2>&1
  done
done
echo "timeline runs: $(($(date +%s) - t0)) s"
for f in "$OUT"/tl_*_1.log "$OUT"/tl_*_2.log; do
  echo "== $(basename "$f")"
  grep -E '^# timeline|^\| (gemv fp8|gemv_small tc)' "$f" | cut -c1-400
done
bash scripts/pack-out.sh
