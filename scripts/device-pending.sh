#!/usr/bin/env bash
# On the GPU machine (device tool): the pending W4A8 release branches' checks and A/Bs in one call (about 500 s, at
# most 540), after the device-prepare.sh line of scripts/device-l2-ahead.sh (one tarball for both and for
# device-sanitize.sh). pending/w4a8-release-order: the fifty-second session's racecheck finding (a WAR hazard
# between the W4A8 consumers' lds128 of a stage's weights and the producer's next bulk copy into it,
# bn8_wg1_g2_s5 in MoeW4A8Gpu.GemmFlashW2ManyTokenTiles). MOESERVE_W4A8_RELEASE=1: the producer's fence.proxy.async
# after its empty wait; =2: every consumer thread arrives on the empty barrier; =3: the weights by descriptor TMA
# (cp.async.bulk.tensor) instead of cp.async.bulk, the form that flash-attention's notes find racecheck to track
# (moe-w4a8.md, fifty-third section); unset: main's order. pending/w4a8-proxy-fence: form 1 at compile time. The
# branches' W4A8 tests (rel under 1, 2 and 3, fence), racecheck of that test under 0-3 (which form the tool
# accepts), and what each costs: the dispatch table's picks, decode 1-256 (settled) and prefill 4K-32K, main
# against rel under 2 and 3 and against fence (form 1; its runtime twin rel=1 is not timed).
# Usage: bash scripts/device-pending.sh --prebuilt FILE.tar.xz   (moe-w4a8.md, fifty-second section)
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
w4a8_tests=(--gtest_brief=1 --gtest_filter='MoeW4A8Gpu.*:GpuW4A8Moe.*')
for r in 1 2 3; do
  step "rel${r}_tests" 80 env MOESERVE_W4A8_RELEASE=$r "$BIN/test_gpu_rel" "${w4a8_tests[@]}"
done
step fence_tests 80 "$BIN/test_gpu_fence" "${w4a8_tests[@]}"
echo "## elapsed $(( $(date +%s) - T0 ))s"
# Release 0 (main's order) with 400 findings printed: which CTAs, configs and regions (the previous run printed 40,
# all of one CTA); then 1, 2 and 3, whose question is only whether the tool still reports the hazard. Three configs
# (a decode one, a 64-token one, a prefill one with the copier warps), each with fixed and counter-fed items.
for r in 0 1 2 3; do
  mkdir -p "$OUT/race$r"
  OUT=$OUT/race$r MOESERVE_W4A8_RELEASE=$r SANITIZE_BINARY=test_gpu_rel SANITIZE_BUDGET=50 SANITIZE_RUN_MAX=50 \
    SANITIZE_W4A8_CONFIGS=bn8_wg1_g2_s5,bn64_wg2_g1_s8,bn128_wg2_g1_s5_pf \
    SANITIZE_PRINT_LIMIT=$([ $r = 0 ] && echo 400 || echo 40) \
    bash scripts/device-sanitize.sh --prebuilt "$BIN" 'racecheck=MoeW4A8Gpu.GemmFlashW2ManyTokenTiles' 2>&1 |
    grep -E "^racecheck|Error|Warning|Read|Write" | head -6 | sed "s/^/release=$r: /"
done
log0=$(ls "$OUT"/race0/sanitize-*.log 2>/dev/null | head -1)
if [ -n "$log0" ]; then
  echo "release=0 findings by CTA, launch config and access pair:"
  grep -oE "hazard detected at __shared__ 0x[0-9a-f]+ in block \([0-9,]+\)" "$log0" | sed 's/.*block/block/' |
    sort | uniq -c | sort -rn | head -5
  grep -oE "launch_cfg<[^>]*>" "$log0" | sort | uniq -c | head -5
  grep -oE "(Read|Write) Thread \([0-9,]+\) at [^ ]+" "$log0" | sed -E 's/\([0-9,]+\)/(t)/' | sort | uniq -c | head -6
  lo_hi=$(grep -oE "__shared__ 0x[0-9a-f]+" "$log0" | awk '{print $2}' | sort -u | sed -n '1p;$p' | tr '\n' ' ')
  echo "addresses ${lo_hi}(lowest, highest)"
fi
echo "## elapsed $(( $(date +%s) - T0 ))s"
rel="bench_gpu_moe_w4a8 bench_gpu_moe_w4a8_rel=MOESERVE_W4A8_RELEASE=2 bench_gpu_moe_w4a8_rel=MOESERVE_W4A8_RELEASE=3"
rel+=" bench_gpu_moe_w4a8_fence"
# shellcheck disable=SC2086
OUT=$OUT/decode timeout 150 bash scripts/device-w4a8-ab.sh --prebuilt "$BIN" --rounds 2 --picks -- \
  --decode 1,4,16,64,256 --prefill - --settled --no-peer @ $rel 2>&1 | grep -E "^==|^geomean|  1 |  4 |  64 "
echo "## elapsed $(( $(date +%s) - T0 ))s"
left=$(( 540 - ($(date +%s) - T0) ))
# shellcheck disable=SC2086
OUT=$OUT/prefill timeout "$left" bash scripts/device-w4a8-ab.sh --prebuilt "$BIN" --rounds 2 --picks -- --decode - \
  --prefill 4096,16384,32768 --no-peer @ $rel 2>&1 | grep -E "^==|^geomean|prefill"
echo "## elapsed $(( $(date +%s) - T0 ))s"
bash scripts/pack-out.sh
