#!/usr/bin/env bash
# On the GPU machine (device tool): pending/w4a8-l2-ahead in one call (about 250 s, at most 400), after
#   VARIANTS="rel=pending/w4a8-release-order fence=pending/w4a8-proxy-fence l2=pending/w4a8-l2-ahead" \
#   PACK_ONLY="test_gpu bench_gpu_moe_w4a8 test_gpu_rel bench_gpu_moe_w4a8_rel test_gpu_fence \
#   bench_gpu_moe_w4a8_fence test_gpu_l2 bench_gpu_moe_w4a8_l2" bash scripts/device-prepare.sh
# here (one tarball for this script, device-pending.sh and device-sanitize.sh). MOESERVE_W4A8_L2_AHEAD=N: the W4A8
# producer asks L2 for the weights N chunks ahead of the stage it loads. The question (moe-w4a8.md, fifty-third
# section): at 4K tokens the prefill shapes need 62-90 % of 4.28 TB/s at issue 8's 60 % line and stream at 39-57 %,
# with a ring of 5 stages (~43 KB of weights per SM in flight at most, a third of the decode configs'). Steps: the
# branch's W4A8 tests under N = 8; the dispatch table's picks, prefill 4K-32K (no peer), unset against N = 8 and 16,
# in one binary (no layout spread between the sides); the same for decode 1-256 tokens (settled), to see whether
# the switch may stay on there too.
# Usage: bash scripts/device-l2-ahead.sh --prebuilt FILE.tar.xz
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
[ "${1:-}" = "--prebuilt" ] && [ $# -eq 2 ] || { echo "usage: $0 --prebuilt DIR|FILE.tar.xz" >&2; exit 2; }
export OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
source scripts/prebuilt-env.sh
use_prebuilt "$2"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
T0=$(date +%s)
s=$(date +%s)
timeout 90 env MOESERVE_W4A8_L2_AHEAD=8 "$BIN/test_gpu_l2" --gtest_brief=1 \
  --gtest_filter='MoeW4A8Gpu.*:GpuW4A8Moe.*' >"$OUT/l2_tests.log" 2>&1
echo "## l2_tests (AHEAD=8) rc=$? $(( $(date +%s) - s ))s :: $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/l2_tests.log" | tr '\n' ' ')"
grep -E '^\[  FAILED  \]' "$OUT/l2_tests.log" | head -8
sides="bench_gpu_moe_w4a8_l2 bench_gpu_moe_w4a8_l2=MOESERVE_W4A8_L2_AHEAD=8 bench_gpu_moe_w4a8_l2=MOESERVE_W4A8_L2_AHEAD=16"
# shellcheck disable=SC2086
OUT=$OUT/prefill timeout 200 bash scripts/device-w4a8-ab.sh --prebuilt "$BIN" --rounds 2 --picks -- --decode - \
  --prefill 4096,16384,32768 --no-peer @ $sides 2>&1
echo "## elapsed $(( $(date +%s) - T0 ))s"
left=$(( 400 - ($(date +%s) - T0) ))
# shellcheck disable=SC2086
OUT=$OUT/decode timeout "$left" bash scripts/device-w4a8-ab.sh --prebuilt "$BIN" --rounds 2 --picks -- \
  --decode 1,4,16,64,256 --prefill - --settled --no-peer @ $sides 2>&1
echo "## elapsed $(( $(date +%s) - T0 ))s"
for side in "" _MOESERVE_W4A8_L2_AHEAD_8 _MOESERVE_W4A8_L2_AHEAD_16; do  # the prefill picks against both floors
  echo "== floors: bench_gpu_moe_w4a8_l2$side"
  python3 tools/w4a8_floors.py "$OUT"/prefill/w4a8ab_bench_gpu_moe_w4a8_l2"$side".r*.log | grep -E "shape|\| [0-9]+ us \("
done
bash scripts/pack-out.sh
