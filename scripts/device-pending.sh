#!/usr/bin/env bash
# On the GPU machine (device tool): the two pending branches' checks and A/Bs in one call (about 560 s), after
#   VARIANTS="w16=pending/gemv-tc-16warps stage=pending/w4a8-stage-constants" \
#   PACK_ONLY="test_gpu bench_gpu_ops bench_gpu_moe_w4a8 test_gpu_w16 bench_gpu_ops_w16 test_gpu_stage \
#   bench_gpu_ops_stage bench_gpu_moe_w4a8_stage" bash scripts/device-prepare.sh
# here (the whole set would pass the carry limit). gemv-tc-16warps: its GEMV test in three forms, the model tests with
# MOESERVE_GEMV_TC=1, the one-row linears and the FP8-expert layer at B=1 (main, main with the tensor-core GEMV, the
# branch's 16 warps, its half rows). w4a8-stage-constants: its W4A8 tests, the MXFP4 layer and the decode sweep A/B.
# Usage: bash scripts/device-pending.sh --prebuilt FILE.tar.xz   (cuda-ops.md / moe-w4a8.md, fifty-first section)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
[ "${1:-}" = "--prebuilt" ] && [ $# -eq 2 ] || { echo "usage: $0 --prebuilt DIR|FILE.tar.xz" >&2; exit 2; }
export OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
source scripts/prebuilt-env.sh
use_prebuilt "$2"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
T0=$(date +%s)
step() { local name=$1 lim=$2; shift 2; local s; s=$(date +%s); timeout "$lim" "$@" >"$OUT/$name.log" 2>&1; local rc=$?
  echo "## $name rc=$rc $(( $(date +%s) - s ))s :: $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/$name.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]' "$OUT/$name.log" | head -8; }
step w16_test 60 "$BIN/test_gpu_w16" --gtest_brief=1 --gtest_filter='CudaGemm.OneBatchGemvSmall*:CudaGemm.StreamingGemvOneRow'
step w16_test_b2 60 env MOESERVE_GEMV_TC_BLOCKS_PER_SM=2 "$BIN/test_gpu_w16" --gtest_brief=1 --gtest_filter='CudaGemm.OneBatchGemvSmallTensorCores'
step w16_test_w8 60 env MOESERVE_GEMV_TC_WARPS=8 "$BIN/test_gpu_w16" --gtest_brief=1 --gtest_filter='CudaGemm.OneBatchGemvSmallTensorCores'
step stage_tests 150 "$BIN/test_gpu_stage" --gtest_brief=1 --gtest_filter='MoeW4A8Gpu.*:GpuW4A8Moe.*'
step tc_models 200 env MOESERVE_GEMV_TC=1 "$BIN/test_gpu" --gtest_brief=1 --gtest_filter='*GpuParity*:GpuDummy*:GpuSkinnyPaths.*:GpuFp8Moe*:CudaGemm.*'
echo "## elapsed $(( $(date +%s) - T0 ))s"
for r in 1 2; do
  for v in base:bench_gpu_ops: tc:bench_gpu_ops:MOESERVE_GEMV_TC=1 w16:bench_gpu_ops_w16:MOESERVE_GEMV_TC=1 w16b2:bench_gpu_ops_w16:MOESERVE_GEMV_TC=1,MOESERVE_GEMV_TC_BLOCKS_PER_SM=2; do
    IFS=: read -r n b e <<<"$v"; IFS=, read -r -a envs <<<"$e"
    echo "== round $r $n" >>"$OUT/linear.log"
    MOESERVE_BENCH_SHAPE="M=1 " timeout 60 env "${envs[@]}" "$BIN/$b" linear >>"$OUT/linear.log" 2>&1
  done
done
grep -E "^== round|(4096x2048|8192x1024)" "$OUT/linear.log" | grep -E "^==|gemv fp8 \(exact|tc fp8 \(direct" | cut -c1-150 | head -50
echo "## elapsed $(( $(date +%s) - T0 ))s"
MOESERVE_LAYER_BATCHES=1 MOESERVE_LAYER_EXPERTS=fp8 timeout 150 bash scripts/device-ab.sh --prebuilt "$BIN" --rounds 3 base tc=MOESERVE_GEMV_TC=1 w16@bench_gpu_ops_w16=MOESERVE_GEMV_TC=1 w16b2@bench_gpu_ops_w16=MOESERVE_GEMV_TC=1,MOESERVE_GEMV_TC_BLOCKS_PER_SM=2 2>&1 | grep -vE "^pack-out" | tail -7
echo "## elapsed $(( $(date +%s) - T0 ))s"
MOESERVE_LAYER_BATCHES=1 timeout 90 bash scripts/device-ab.sh --prebuilt "$BIN" --rounds 3 mx_base stage@bench_gpu_ops_stage mx_tc=MOESERVE_GEMV_TC=1 2>&1 | tail -6
echo "## elapsed $(( $(date +%s) - T0 ))s"
left=$(( 560 - ($(date +%s) - T0) ))
timeout "$left" bash scripts/device-w4a8-ab.sh --prebuilt "$BIN" --rounds 2 -- --decode 1,2,4,8,16,32,64,128,256 --prefill - --settled @ bench_gpu_moe_w4a8 bench_gpu_moe_w4a8_stage 2>&1 | tail -40
echo "## elapsed $(( $(date +%s) - T0 ))s"
bash scripts/pack-out.sh
