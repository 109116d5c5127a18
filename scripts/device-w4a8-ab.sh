#!/usr/bin/env bash
# On the GPU machine (device tool), after scripts/device-prepare.sh here (BASELINE=COMMIT adds
# bench_gpu_moe_w4a8_base, VARIANTS="NAME=COMMIT" adds bench_gpu_moe_w4a8_NAME): A/B of W4A8 GEMM builds by their
# tuning sweeps, in interleaved rounds within one call, compared by tools/w4a8_sweep_ab.py (each config's minimum
# over the rounds; best config against best config, and config by config). The first build is the baseline.
# Usage: bash scripts/device-w4a8-ab.sh --prebuilt DIR|FILE.tar.xz [--rounds N] [--routing uniform|zipf|all] [--picks]
#                                      [-- BENCH_ARGS... @] BINARY[=ENV=VALUE[,ENV=VALUE...]] ...
#   --picks compares what each build's dispatch table picks instead of each build's best config (two tables, or one
#   table under two settings); the runs then time the picks only (no --tune sweep).
#   e.g. bash scripts/device-w4a8-ab.sh --prebuilt .device-bin.tar.xz --rounds 3 -- --decode 1,4,16 --prefill - \
#          --settled @ bench_gpu_moe_w4a8_base bench_gpu_moe_w4a8 bench_gpu_moe_w4a8=X=1
#   BENCH_ARGS (between -- and @) go to every run (after `--tune FILE` unless --picks); a BINARY=... entry runs that
#   binary under the environment settings given (the name in the tables is the whole entry). Logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=scripts/prebuilt-env.sh
source scripts/prebuilt-env.sh
device_script_start "--prebuilt DIR|FILE.tar.xz [--rounds N] [-- ARGS... @] BINARY..." "$@"
shift 2
ROUNDS=2 ROUTING=uniform PICKS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --routing) ROUTING=$2; shift 2 ;;
    --picks) PICKS=--picks; shift ;;
    --) shift; break ;;
    *) break ;;
  esac
done
ARGS=()
if [[ " $* " == *" @ "* ]]; then
  while [ "$1" != "@" ]; do ARGS+=("$1"); shift; done
  shift
fi
if [ $# -lt 2 ]; then echo "device-w4a8-ab: name at least two builds (the first is the baseline)" >&2; exit 2; fi
# Each entry's logs are named after it, so an entry named twice would compare one set of logs with itself.
if [ "$(printf '%s\n' "$@" | sort | uniq -d)" ]; then
  echo "device-w4a8-ab: an entry is named twice; for one binary under two settings name it as BIN and BIN=ENV=V" >&2
  exit 2
fi
slug() { echo "$1" | tr -c 'A-Za-z0-9_\n' '_'; }
for ((r = 1; r <= ROUNDS; ++r)); do
  for entry in "$@"; do
    bin=${entry%%=*}
    settings=""
    [[ "$entry" == *=* ]] && settings=${entry#*=}
    split_settings "$settings"
    log="$OUT/w4a8ab_$(slug "$entry").r$r.log"
    start=$(date +%s)
    tune=(--tune "$OUT/table_$(slug "$entry").inc")
    [ -n "$PICKS" ] && tune=()
    env "${envs[@]}" "$BIN/$bin" "${tune[@]}" "${ARGS[@]}" >"$log" 2>&1
    echo "round $r $entry: rc=$? $(( $(date +%s) - start )) s"
  done
done
base=$1
shift
for entry in "$@"; do
  echo "== $entry against $base ($ROUNDS rounds, routing $ROUTING)"
  python3 tools/w4a8_sweep_ab.py --base "$OUT/w4a8ab_$(slug "$base").r*.log" --new "$OUT/w4a8ab_$(slug "$entry").r*.log" \
    --routing "$ROUTING" $PICKS
done
rm -f "$OUT"/table_*.inc
bash scripts/pack-out.sh  # more than 8 files under $OUT would not all come back
