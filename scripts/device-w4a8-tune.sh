#!/usr/bin/env bash
# On the GPU machine (device tool), after scripts/device-prepare.sh here: tune the W4A8 dispatch table for the GPU
# that runs it. ROUNDS plain sweeps (`bench_gpu_moe_w4a8 --tune`: decode 1-256 tokens and prefill 4K-32K, every
# config for every shape and routing) alternate with ROUNDS --settled ones (decode 1-32 tokens, launched as the
# engine's decode chain launches them); tools/w4a8_table_from_sweeps.py takes each candidate's median over them (the
# minimum picked one lucky call's times on an H100, moe-w4a8.md, sixty-first session) and
# merges this GPU's block into the committed table: $OUT/moe_w4a8_dispatch_table.inc, the other GPUs' blocks as they
# are (on stderr: which picks move, and a held-out new / old that the choice does not flatter). Back on the CPU
# machine: copy that file over src/kernels/cuda/moe_w4a8_dispatch_table.inc and rebuild
# (MoeW4A8Gpu.DispatchTableByRoutedSlots checks every GPU's block). Without an entry for its GPU the engine takes the
# heuristic's configs and says so at load.
# Usage: bash scripts/device-w4a8-tune.sh --prebuilt DIR|FILE.tar.xz [--rounds N]   (N = 3; a plain sweep takes
#        ~42 s and a settled one ~6 s on an H100, 31-52 s plain on an H200: docs/benchmarks/moe-w4a8.md)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=scripts/prebuilt-env.sh
source scripts/prebuilt-env.sh
device_script_start "--prebuilt DIR|FILE.tar.xz [--rounds N]" "$@"
shift 2
ROUNDS=3
if [ "${1:-}" = "--rounds" ]; then ROUNDS=$2; shift 2; fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"
failed=0
for ((r = 1; r <= ROUNDS; ++r)); do
  for kind in plain settled; do
    args=(--tune "$OUT/table_$kind.r$r.inc" --no-peer)
    [ $kind = settled ] && args+=(--settled --decode "1,2,4,8,16,32" --prefill -)
    start=$(date +%s)
    timeout 240 "$BIN/bench_gpu_moe_w4a8" "${args[@]}" >"$OUT/tune_$kind.r$r.log" 2>&1
    rc=$?
    echo "round $r $kind: rc=$rc $(( $(date +%s) - start )) s"
    [ $rc = 0 ] || failed=1
  done
done
rm -f "$OUT"/table_*.inc  # the merged table below replaces the single-run ones
if [ $failed = 0 ]; then
  python3 tools/w4a8_table_from_sweeps.py --stat median --date "$(date -u +%F)" \
    --merge src/kernels/cuda/moe_w4a8_dispatch_table.inc \
    --settled "$OUT/tune_settled.r*.log" "$OUT/tune_plain.r*.log" >"$OUT/moe_w4a8_dispatch_table.inc"
  rc=$?
  echo "w4a8_table_from_sweeps: rc=$rc"
  # This GPU's block, for the note.
  [ $rc = 0 ] && grep -F "// GPU \"$(cut -d, -f1 "$OUT/gpu.txt")\"" -A 48 "$OUT/moe_w4a8_dispatch_table.inc"
else
  echo "device-w4a8-tune: a sweep failed (logs under \$OUT); no table written"
fi
bash scripts/pack-out.sh  # more than 8 files under $OUT would not all come back
