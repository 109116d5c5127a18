#!/usr/bin/env bash
# On the GPU machine (device tool): a re-tuned W4A8 dispatch block against the block it replaces, timed as the engine
# launches them. Build here first with `BASELINE=COMMIT bash scripts/device-prepare.sh` (COMMIT: the tree before the
# re-tune), so that the *_base binaries carry the old table; once the benchmarks no longer build against COMMIT's
# sources, with a patch that restores only the old block instead:
#   VARIANTS="base=scripts/pending/w4a8-h200-table-before-63.patch" \
#     PACK_ONLY="bench_gpu_moe_w4a8 bench_gpu_moe_w4a8_base bench_gpu_ops bench_gpu_ops_base" bash scripts/device-prepare.sh
# (the sixty-third session's H200 block against the one before it; run in the seventy-fourth session, the patch then
# deleted: it is in git history at d2ac216). Three parts in one call, each in interleaved
# rounds:
#   decode/  decode 1-32 tokens launched --settled (the decode chain's launches), each build's picks;
#   plain/   decode 64-256 tokens and prefill 4K-32K, plain launches, each build's picks;
#   layer/   the MXFP4-expert V4-Flash decode layer at batch 1 (bench_gpu_ops against bench_gpu_ops_base).
# The picks are compared by tools/w4a8_sweep_ab.py (device-w4a8-ab.sh --picks), the layer by its medians
# (device-ab.sh). Logs under $OUT/{decode,plain,layer}.
# Usage: bash scripts/device-w4a8-table-ab.sh --prebuilt DIR|FILE.tar.xz [--rounds N]   (N = 3 for the picks; the
#        layer takes N + 2)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=scripts/prebuilt-env.sh
source scripts/prebuilt-env.sh
device_script_start "--prebuilt DIR|FILE.tar.xz [--rounds N]" "$@"
prebuilt=$2
shift 2
ROUNDS=3
if [ "${1:-}" = "--rounds" ]; then ROUNDS=$2; shift 2; fi
for b in bench_gpu_moe_w4a8_base bench_gpu_ops_base; do
  if [ ! -x "$BIN/$b" ]; then
    echo "device-w4a8-table-ab: $b is not in $prebuilt; build with BASELINE=COMMIT bash scripts/device-prepare.sh" >&2
    exit 2
  fi
done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>/dev/null | tee "$OUT/gpu.txt"
top=$OUT
part() {  # part NAME COMMAND...: run a part with its logs under $top/NAME, its summary on stdout
  local name=$1
  shift
  mkdir -p "$top/$name"
  echo "== $name"
  OUT=$top/$name "$@" >"$top/$name/summary.txt" 2>&1
  echo "rc=$?"
  cat "$top/$name/summary.txt"
}
part decode bash scripts/device-w4a8-ab.sh --prebuilt "$prebuilt" --rounds "$ROUNDS" --picks -- --no-peer --settled \
  --decode 1,2,4,8,16,32 --prefill - @ bench_gpu_moe_w4a8_base bench_gpu_moe_w4a8
part plain bash scripts/device-w4a8-ab.sh --prebuilt "$prebuilt" --rounds "$ROUNDS" --picks -- --no-peer \
  --decode 64,128,256 --prefill 4096,16384,32768 @ bench_gpu_moe_w4a8_base bench_gpu_moe_w4a8
part layer env MOESERVE_LAYER_BATCHES=1 bash scripts/device-ab.sh --prebuilt "$prebuilt" --rounds $((ROUNDS + 2)) \
  new old@bench_gpu_ops_base
