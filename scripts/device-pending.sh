#!/usr/bin/env bash
# On the GPU machine (device tool): the pending W4A8 experiment's checks and A/Bs (scripts/pending/*.patch), one call
# of at most 570 s, after
#   VARIANTS="rel=scripts/pending/w4a8-release-order.patch" \
#   PACK_ONLY="test_gpu bench_gpu_moe_w4a8 test_gpu_rel bench_gpu_moe_w4a8_rel" bash scripts/device-prepare.sh
# here. w4a8-release-order.patch (moe-w4a8.md, fifty-second to fifty-fifth sections): racecheck reports WAR hazards
# in the W4A8 GEMM's stage reuse. MOESERVE_W4A8_RELEASE bits: 1 the producer's fence.proxy.async after its empty wait
# (fifty-fifth session: still reported), 2 every consumer thread arrives on the empty barrier, 4 the weights by
# descriptor TMA (fifty-fifth session: the weights' hazards gone, the stage_item store after the empty wait reported,
# which bit 2 may answer); 0: main's order. Steps: the W4A8 tests under 2, 4 and 6; racecheck of the flagged test
# under 2, 4 and 6; what each costs, by the dispatch table's picks (decode 1-256 settled, prefill 4K-32K).
# Usage: bash scripts/device-pending.sh --prebuilt FILE.tar.xz
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
[ "${1:-}" = "--prebuilt" ] && [ $# -eq 2 ] || { echo "usage: $0 --prebuilt DIR|FILE.tar.xz" >&2; exit 2; }
export OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
source scripts/prebuilt-env.sh
use_prebuilt "$2"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
T0=$(date +%s)
LIMIT=${LIMIT:-570}  # seconds for the whole call (the last step gets what is left)
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
step() { local name=$1 lim=$2; shift 2; local s; s=$(date +%s); timeout "$lim" "$@" >"$OUT/$name.log" 2>&1; local rc=$?
  echo "## $name rc=$rc $(( $(date +%s) - s ))s :: $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/$name.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]' "$OUT/$name.log" | head -8; }
w4a8_tests=(--gtest_brief=1 --gtest_filter='MoeW4A8Gpu.*:GpuW4A8Moe.*')
rel_sides="bench_gpu_moe_w4a8 bench_gpu_moe_w4a8_rel=MOESERVE_W4A8_RELEASE=2 bench_gpu_moe_w4a8_rel=MOESERVE_W4A8_RELEASE=4"
rel_sides+=" bench_gpu_moe_w4a8_rel=MOESERVE_W4A8_RELEASE=6"
for r in 2 4 6; do step "rel${r}_tests" 45 env MOESERVE_W4A8_RELEASE=$r "$BIN/test_gpu_rel" "${w4a8_tests[@]}"; done
echo "## elapsed $(( $(date +%s) - T0 ))s"
# Three configs (a decode one, a 64-token one, a prefill one with the copier warps), fixed and counter-fed items.
for r in 2 4 6; do
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
bash scripts/pack-out.sh
