#!/usr/bin/env bash
# On the GPU machine (device tool): the pending W4A8 experiments' checks and A/Bs (scripts/pending/*.patch), in two
# calls of at most 570 s, after
#   VARIANTS="rel=scripts/pending/w4a8-release-order.patch l2=scripts/pending/w4a8-l2-ahead.patch" \
#   PACK_ONLY="test_gpu bench_gpu_moe_w4a8 test_gpu_rel bench_gpu_moe_w4a8_rel test_gpu_l2 bench_gpu_moe_w4a8_l2" \
#   bash scripts/device-prepare.sh
# here (one tarball for both parts).
# w4a8-release-order.patch (moe-w4a8.md, fifty-second and fifty-third sections): racecheck reports a WAR hazard
# between the W4A8 consumers' lds128 of a stage's weights and the producer's next cp.async.bulk into it.
# MOESERVE_W4A8_RELEASE=1: the producer's fence.proxy.async after its empty wait; 2: every consumer thread arrives on
# the empty barrier; 3: the weights by descriptor TMA (the form flash-attention's notes find racecheck to track);
# unset: main's order. w4a8-l2-ahead.patch: MOESERVE_W4A8_L2_AHEAD=N asks L2 for the weights N stages ahead.
# Part 1 (the bars first): the L2 branch's W4A8 tests under N = 8; its A/B by the dispatch table's picks, prefill
#   4K-32K and decode 1-256 tokens (settled), unset against N = 8 and 16 in one binary; main's whole test_gpu.
# Part 2: the release branch's W4A8 tests under 1-3; racecheck of the flagged test under release 0-3; what releases
#   1-3 cost (decode and prefill picks).
# Usage: bash scripts/device-pending.sh --prebuilt FILE.tar.xz 1|2
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
[ "${1:-}" = "--prebuilt" ] && [ $# -eq 3 ] || { echo "usage: $0 --prebuilt DIR|FILE.tar.xz 1|2" >&2; exit 2; }
PART=$3
export OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
source scripts/prebuilt-env.sh
use_prebuilt "$2"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
T0=$(date +%s)
LIMIT=${LIMIT:-570}  # seconds for the whole part (the last step gets what is left)
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
step() { local name=$1 lim=$2; shift 2; local s; s=$(date +%s); timeout "$lim" "$@" >"$OUT/$name.log" 2>&1; local rc=$?
  echo "## $name rc=$rc $(( $(date +%s) - s ))s :: $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/$name.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]' "$OUT/$name.log" | head -8; }
w4a8_tests=(--gtest_brief=1 --gtest_filter='MoeW4A8Gpu.*:GpuW4A8Moe.*')
l2_sides="bench_gpu_moe_w4a8_l2 bench_gpu_moe_w4a8_l2=MOESERVE_W4A8_L2_AHEAD=8 bench_gpu_moe_w4a8_l2=MOESERVE_W4A8_L2_AHEAD=16"
rel_sides="bench_gpu_moe_w4a8 bench_gpu_moe_w4a8_rel=MOESERVE_W4A8_RELEASE=1 bench_gpu_moe_w4a8_rel=MOESERVE_W4A8_RELEASE=2"
rel_sides+=" bench_gpu_moe_w4a8_rel=MOESERVE_W4A8_RELEASE=3"
if [ "$PART" = 1 ]; then
  step l2_tests 60 env MOESERVE_W4A8_L2_AHEAD=8 "$BIN/test_gpu_l2" "${w4a8_tests[@]}"
  # shellcheck disable=SC2086
  OUT=$OUT/l2_prefill timeout 200 bash scripts/device-w4a8-ab.sh --prebuilt "$BIN" --rounds 2 --picks -- \
    --decode - --prefill 4096,16384,32768 --no-peer @ $l2_sides 2>&1
  echo "## elapsed $(( $(date +%s) - T0 ))s"
  # shellcheck disable=SC2086
  OUT=$OUT/l2_decode timeout 120 bash scripts/device-w4a8-ab.sh --prebuilt "$BIN" --rounds 2 --picks -- \
    --decode 1,4,16,64,256 --prefill - --settled --no-peer @ $l2_sides 2>&1
  echo "## elapsed $(( $(date +%s) - T0 ))s"
  step main_test_gpu "$(left)" "$BIN/test_gpu" --gtest_brief=1
else
  for r in 1 2 3; do step "rel${r}_tests" 60 env MOESERVE_W4A8_RELEASE=$r "$BIN/test_gpu_rel" "${w4a8_tests[@]}"; done
  echo "## elapsed $(( $(date +%s) - T0 ))s"
  # Three configs (a decode one, a 64-token one, a prefill one with the copier warps), fixed and counter-fed items.
  for r in 0 1 2 3; do
    mkdir -p "$OUT/race$r"
    OUT=$OUT/race$r MOESERVE_W4A8_RELEASE=$r SANITIZE_BINARY=test_gpu_rel SANITIZE_BUDGET=45 SANITIZE_RUN_MAX=45 \
      SANITIZE_W4A8_CONFIGS=bn8_wg1_g2_s5,bn64_wg2_g1_s8,bn128_wg2_g1_s5_pf SANITIZE_PRINT_LIMIT=40 \
      bash scripts/device-sanitize.sh --prebuilt "$BIN" 'racecheck=MoeW4A8Gpu.GemmFlashW2ManyTokenTiles' 2>&1 |
      grep -E "^racecheck|Error|Warning|Read|Write" | head -6 | sed "s/^/release=$r: /"
  done
  echo "## elapsed $(( $(date +%s) - T0 ))s"
  # shellcheck disable=SC2086
  OUT=$OUT/rel_decode timeout 120 bash scripts/device-w4a8-ab.sh --prebuilt "$BIN" --rounds 2 --picks -- \
    --decode 1,4,16,64,256 --prefill - --settled --no-peer @ $rel_sides 2>&1 | grep -E "^==|^geomean|  1 |  4 |  64 "
  echo "## elapsed $(( $(date +%s) - T0 ))s"
  # shellcheck disable=SC2086
  OUT=$OUT/rel_prefill timeout "$(left)" bash scripts/device-w4a8-ab.sh --prebuilt "$BIN" --rounds 2 --picks -- \
    --decode - --prefill 4096,16384,32768 --no-peer @ $rel_sides 2>&1 | grep -E "^==|^geomean|prefill"
  echo "## elapsed $(( $(date +%s) - T0 ))s"
fi
for side in "" _MOESERVE_W4A8_L2_AHEAD_8 _MOESERVE_W4A8_L2_AHEAD_16; do  # the L2 prefill picks against both floors
  logs=$(ls "$OUT"/l2_prefill/w4a8ab_bench_gpu_moe_w4a8_l2"$side".r*.log 2>/dev/null)
  [ -n "$logs" ] || continue
  echo "== floors: bench_gpu_moe_w4a8_l2$side"
  # shellcheck disable=SC2086
  python3 tools/w4a8_floors.py $logs | grep -E "shape|\| [0-9]+ us \("
done
bash scripts/pack-out.sh
