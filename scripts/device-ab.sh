#!/usr/bin/env bash
# On the GPU machine (device tool), after scripts/device-prepare.sh here: A/B timing of the V4-Flash decode layer
# (`bench_gpu_ops layer`, MXFP4 experts, or FP8 ones with MOESERVE_LAYER_EXPERTS=fp8; batch 1 / 8 / 32) under
# environment settings, in interleaved rounds within one call (the batch-1 figure moves by a few us between calls;
# within a call repeats agree to about 1.5 us).
# Usage: bash scripts/device-ab.sh --prebuilt .device-bin.tar.xz [--rounds N] NAME=ENV=VALUE[,ENV=VALUE...] ...
#   e.g. bash scripts/device-ab.sh --prebuilt .device-bin.tar.xz base chain_off=MOESERVE_MOE_CHAIN=0
#   A value may hold commas (tc=MOESERVE_GEMV_TC=8192x1024,4096x2048): a piece without '=' joins the setting before.
#   A bare NAME runs with the environment as it is. NAME@BINARY runs that benchmark binary of the prebuilt set
#   instead of bench_gpu_ops (a baseline build: `BASELINE=COMMIT bash scripts/device-prepare.sh` adds
#   bench_gpu_ops_base, built from COMMIT's sources), e.g. `new old@bench_gpu_ops_base`.
#   MOESERVE_LAYER_BATCHES=1 in the environment times batch 1 only (a round of five configs then takes seconds).
#   Prints each config's runs and median; logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=scripts/prebuilt-env.sh
source scripts/prebuilt-env.sh
device_script_start "--prebuilt DIR|FILE.tar.xz [--rounds N] CONFIG..." "$@"
shift 2
ROUNDS=3
if [ "${1:-}" = "--rounds" ]; then ROUNDS=$2; shift 2; fi
if [ $# -eq 0 ]; then set -- base; fi

# shellcheck source=scripts/gpu-clocks.sh
source scripts/gpu-clocks.sh
clocks_start "$OUT/clocks_ab.csv"
declare -A runs
for ((r = 1; r <= ROUNDS; ++r)); do
  for cfg in "$@"; do
    name=${cfg%%=*}
    settings=""
    [[ "$cfg" == *=* ]] && settings=${cfg#*=}
    bench=bench_gpu_ops
    if [[ "$name" == *@* ]]; then bench=${name#*@}; fi
    split_settings "$settings"
    log="$OUT/ab_${name//[^A-Za-z0-9_]/_}.log"
    lines_before=0
    [ -f "$log" ] && lines_before=$(wc -l <"$log")
    env "${envs[@]}" "$BIN/$bench" layer >>"$log" 2>&1
    # One run's B=1, B=8, B=32 us per layer: MXFP4 experts, or FP8 ones where the run has no MXFP4 rows
    # (MOESERVE_LAYER_EXPERTS=fp8).
    run_log=$(tail -n +"$((lines_before + 1))" "$log")
    rows=$(grep -E 'mxfp4 \(W4A8\) experts \| B=(1|8|32) ' <<<"$run_log")
    [ -n "$rows" ] || rows=$(grep -E ' fp8 experts \| B=(1|8|32) ' <<<"$run_log")
    line=$(echo "$rows" | tail -3 | awk -F'|' '{printf "%s/", $4}' | tr -d ' ')
    runs[$name]="${runs[$name]:-} ${line%/}"
  done
done
echo "== device-ab ($(date -u +%F), $ROUNDS rounds): us per V4-Flash layer, MXFP4 experts (FP8 under MOESERVE_LAYER_EXPERTS=fp8), B=1/B=8/B=32 per run"
for cfg in "$@"; do
  name=${cfg%%=*}
  med=$(for v in ${runs[$name]}; do echo "${v%%/*}"; done | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}')
  printf "%-16s B=1 median %8s us   runs:%s\n" "$name" "$med" "${runs[$name]}"
done
clocks_stop
echo "clocks over all rounds: $(clocks_summary "$OUT/clocks_ab.csv")"
bash scripts/pack-out.sh  # more than 8 files under $OUT would not all come back
