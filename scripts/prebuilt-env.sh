# shellcheck shell=bash
# Sourced by the device scripts: use_prebuilt DIR|FILE.tar.xz unpacks binaries made by scripts/device-prepare.sh
# (a .tar.xz into build-prebuilt/), sets BIN to their absolute directory and LD_LIBRARY_PATH to find the Debian
# libraries packed beside them, and links the source path they were built in to this tree (the binaries find
# fixtures through it). Run from the repository root.
# split_settings "ENV=V,ENV=V,...": the A/B scripts' settings of one config into the array `envs`; a comma-separated
# piece without '=' belongs to the setting before it, so a value may hold commas (MOESERVE_GEMV_TC=8192x1024,4096x2048).
# device_script_start USAGE "$@" is every --prebuilt script's opening: OUT (default device-out/) made, the first two
# arguments checked to be `--prebuilt DIR|FILE.tar.xz` (else USAGE and exit 2) and used; the caller shifts them off.
use_prebuilt() {
  local dir=$1
  if [[ "$dir" == *.tar.xz ]]; then
    rm -rf build-prebuilt && mkdir -p build-prebuilt && tar xJf "$dir" -C build-prebuilt
    dir=build-prebuilt
  fi
  BIN=$(cd "$dir" && pwd)
  export LD_LIBRARY_PATH=$BIN:${LD_LIBRARY_PATH:-}
  local src
  src=$(cat "$BIN/source_dir" 2>/dev/null || true)
  if [ -n "$src" ] && [ ! -e "$src" ]; then mkdir -p "$(dirname "$src")" && ln -s "$PWD" "$src"; fi
}
device_script_start() {
  local usage=$1
  shift
  OUT=${OUT:-$PWD/device-out}
  mkdir -p "$OUT"
  if [ "${1:-}" != "--prebuilt" ] || [ $# -lt 2 ]; then echo "usage: $0 $usage" >&2; exit 2; fi
  use_prebuilt "$2"
}
split_settings() {
  local piece pieces
  envs=()
  IFS=',' read -r -a pieces <<<"$1"
  for piece in "${pieces[@]}"; do
    if [[ "$piece" == *=* || ${#envs[@]} -eq 0 ]]; then
      envs+=("$piece")
    else
      envs[${#envs[@]} - 1]+=",$piece"
    fi
  done
}
