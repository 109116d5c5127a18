#!/usr/bin/env bash
# On the GPU machine (device tool): build (or take prebuilt binaries), run every GPU test and every GPU
# benchmark, print one short table. Logs go under $OUT (or ./device-out).
# Usage: bash scripts/device-check.sh [--prebuilt DIR] [bench-filter-regex]
#   --prebuilt DIR|FILE.tar.xz: binaries made by scripts/device-prepare.sh on the CPU machine and carried with the call
#   (the GPU machine's image has CUDA and cmake but not the Debian -dev packages the full build needs).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
PREBUILT=""
if [ "${1:-}" = "--prebuilt" ]; then PREBUILT=$2; shift 2; fi
FILTER=${1:-.}
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
gpu_name=$(head -2 "$OUT/gpu.txt" | tail -1 | cut -d, -f1)
start=$(date +%s)
BIN=build-device
if [ -n "$PREBUILT" ]; then
  # shellcheck source=scripts/prebuilt-env.sh
  source scripts/prebuilt-env.sh
  use_prebuilt "$PREBUILT"
else
  cmake -S . -B build-device -DCMAKE_BUILD_TYPE=Release -DMOESERVE_CUDA=ON >"$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
  cmake --build build-device -j"$(nproc)" >"$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -40; exit 1; }
  echo "build: $(( $(date +%s) - start )) s"
fi
rows=()
# The card's own ceilings, measured as shared/reference/h200.md measured the H200's. When bench/ceilings.json has no
# entry for this card, the benchmarks (and the torch peers) use this measurement: MOESERVE_CEILINGS names it.
if python3 -c "import torch" 2>/dev/null; then
  timeout 120 python3 tools/measure_ceilings.py --json "$OUT/ceilings_measured.json" >"$OUT/measure_ceilings.log" 2>&1
  rc=$?
  rows+=("measure_ceilings|rc=$rc|$(tail -1 "$OUT/measure_ceilings.log" | cut -c19-140)")
  if [ $rc = 0 ] && python3 tools/gpu_ceilings.py --use-measured "$OUT/ceilings_measured.json" "$gpu_name"; then
    export MOESERVE_CEILINGS="$OUT/ceilings_measured.json"
    rows+=("  (no bench/ceilings.json entry||the percentages below use this run's measurement)")
  fi
fi
if [ -x $BIN/test_gpu ]; then
  $BIN/test_gpu --gtest_brief=1 >"$OUT/test_gpu.log" 2>&1
  rc=$?
  summary=$(grep -E "^\[  (PASSED|FAILED|SKIPPED)" "$OUT/test_gpu.log" | tr '\n' ' ')
  rows+=("test_gpu|rc=$rc|$summary")
  grep -E "FAILED|Failure" "$OUT/test_gpu.log" | head -20
fi
# shellcheck source=scripts/gpu-clocks.sh
source scripts/gpu-clocks.sh
for b in $BIN/bench_gpu_*; do
  [ -x "$b" ] || continue
  name=$(basename "$b")
  [[ "$name" =~ $FILTER ]] || continue
  [ "$name" = bench_gpu_ops ] && clocks_start "$OUT/clocks_bench_gpu_ops.csv"  # the bars' run: its clocks too
  timeout 300 "$b" >"$OUT/$name.log" 2>&1
  rc=$?
  rows+=("$name|rc=$rc|$(tail -1 "$OUT/$name.log")")
  if [ "$name" = bench_gpu_ops ]; then
    clocks_stop
    rows+=("  clocks during bench_gpu_ops||$(clocks_summary "$OUT/clocks_bench_gpu_ops.csv")")
  fi
done
if [ -x "$BIN/bench_gpu_moe_w4a8" ] && [[ bench_gpu_moe_w4a8 =~ $FILTER ]]; then
  # W4A8 decode as the engine's decode chain launches it (settled counts: schedule and first weight stages before
  # griddepcontrol.wait), beside the plain launches above.
  timeout 300 "$BIN/bench_gpu_moe_w4a8" --settled --prefill - >"$OUT/bench_gpu_moe_w4a8_settled.log" 2>&1
  rows+=("bench_gpu_moe_w4a8 --settled|rc=$?|$(tail -1 "$OUT/bench_gpu_moe_w4a8_settled.log")")
fi
if [ -x "$BIN/bench_gpu_ops" ] && [[ bench_gpu_ops =~ $FILTER ]]; then
  # The batch-1 layer on the step where every compressor emits an entry (one step in 4 on C4 layers, in 128 on C128
  # ones); the bars' step, after 4096 tokens, emits none.
  MOESERVE_LAYER_CTX=4095 MOESERVE_LAYER_BATCHES=1 timeout 300 "$BIN/bench_gpu_ops" layer \
    >"$OUT/bench_gpu_ops_emit.log" 2>&1
  rc=$?
  emit=$(grep -E "decode step / layer" "$OUT/bench_gpu_ops_emit.log" |
    awk -F'|' '{split($2, e, ","); gsub(/^ +| +$/, "", e[2]); gsub(/^ +| +$/, "", $4); printf "%s%s %s us", (NR > 1 ? ", " : ""), e[2], $4}')
  rows+=("layer B=1, emitting step (ctx 4095)|rc=$rc|$emit")
fi
if [ "${PEERS:-1}" != 0 ] && python3 -c "import torch" 2>/dev/null; then  # PyTorch / HF transformers peers (PEERS=0 skips)
  PYTHONUNBUFFERED=1 timeout 300 python3 tools/torch_peers.py >"$OUT/torch_peers.log" 2>&1
  rows+=("torch_peers|rc=$?|$(tail -1 "$OUT/torch_peers.log" | cut -c1-120)")
  # HF eager DeepSeek-V4 on a V4-Flash-shaped 2-layer random model beside `$BIN/moeserve generate --load-format dummy`
  MOESERVE_BIN="$BIN" PYTHONUNBUFFERED=1 timeout 300 python3 tools/hf_flash_dummy_peer.py >"$OUT/hf_flash_dummy_peer.log" 2>&1
  rows+=("hf_flash_dummy_peer|rc=$?|$(tail -1 "$OUT/hf_flash_dummy_peer.log" | cut -c1-120)")
  # grouped MoE GEMM peers for bench_gpu_moe_w4a8 (also writes $OUT/torch_moe_peers.json)
  OUT="$OUT" PYTHONUNBUFFERED=1 timeout 300 python3 tools/torch_moe_peers.py >"$OUT/torch_moe_peers.log" 2>&1
  rows+=("torch_moe_peers|rc=$?|$(tail -1 "$OUT/torch_moe_peers.log" | cut -c1-120)")
fi
echo
echo "== device-check summary ($(date -u +%F) $gpu_name) =="
for r in "${rows[@]}"; do echo "$r" | awk -F'|' '{printf "%-34s %-6s %s\n", $1, $2, $3}'; done
bash scripts/pack-out.sh  # more than 8 log files would not all come back
