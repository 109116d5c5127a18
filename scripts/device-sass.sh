#!/usr/bin/env bash
# On the GPU machine (device tool; cuobjdump is there, not on the CPU machine): the SASS of prebuilt binaries, for
# telling whether two builds compiled a kernel to the same instructions before spending device time on timing them
# (same-source builds time a few % apart between calls). Writes $OUT/BINARY.sass.xz per binary, only the kernels
# whose mangled name matches REGEX (default all); given two binaries, also prints tools/sass_diff.py's comparison.
# Usage: bash scripts/device-sass.sh --prebuilt DIR|FILE.tar.xz [--match REGEX] BINARY [BINARY]
#   e.g. after BASELINE=COMMIT scripts/device-prepare.sh:
#   bash scripts/device-sass.sh --prebuilt .device-bin.tar.xz --match moe_w4a8_gemm bench_gpu_moe_w4a8_base bench_gpu_moe_w4a8
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=scripts/prebuilt-env.sh
source scripts/prebuilt-env.sh
device_script_start "--prebuilt DIR|FILE.tar.xz [--match REGEX] BINARY [BINARY]" "$@"
shift 2
MATCH=.
if [ "${1:-}" = "--match" ]; then MATCH=$2; shift 2; fi
if [ $# -lt 1 ]; then echo "device-sass: name a binary" >&2; exit 2; fi
CUOBJDUMP=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
dumps=()
for b in "$@"; do
  # A missing binary or a failed dump is an error, not an empty dump that then compares as "0 kernels identical"
  # (the first run on the GPU machine, without the carried binaries, printed just that and exited 0).
  if [ ! -f "$BIN/$b" ]; then echo "device-sass: $b: no such binary in $BIN" >&2; exit 1; fi
  # One kernel per "Function :" header; keep the matching ones with their instructions.
  if ! "$CUOBJDUMP" -sass "$BIN/$b" >"$OUT/$b.sass"; then
    echo "device-sass: $b: cuobjdump failed" >&2
    exit 1
  fi
  awk -v re="$MATCH" '/Function : /{keep = ($0 ~ re)} keep' "$OUT/$b.sass" | xz -T0 >"$OUT/$b.sass.xz"
  rm -f "$OUT/$b.sass"
  n=$(xzcat "$OUT/$b.sass.xz" | grep -c 'Function : ')
  echo "device-sass: $b: $n kernels matching '$MATCH' -> \$OUT/$b.sass.xz"
  if [ "$n" -eq 0 ]; then echo "device-sass: $b: no kernel matches '$MATCH'" >&2; exit 1; fi
  dumps+=("$OUT/$b.sass.xz")
done
if [ ${#dumps[@]} -eq 2 ]; then python3 tools/sass_diff.py "${dumps[0]}" "${dumps[1]}"; fi
