#!/usr/bin/env bash
# scripts/device-if-h200.sh runs its command on an H200 only: with a stand-in nvidia-smi naming each card (or none),
# the command runs (its exit status passed through) or does not (exit 3, a line naming the card).
set -uo pipefail
script="$(cd "$(dirname "$0")/../.." && pwd)/scripts/device-if-h200.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
card() {  # card NAME: a stand-in nvidia-smi that prints NAME, or for an empty NAME fails as without a driver
  if [ -n "$1" ]; then
    printf '#!/bin/sh\necho "%s"\n' "$1" >"$tmp/nvidia-smi"
  else
    printf '#!/bin/sh\necho "NVIDIA-SMI has failed" >&2\nexit 9\n' >"$tmp/nvidia-smi"
  fi
  chmod +x "$tmp/nvidia-smi"
}
expect() {  # expect RC RAN OUTPUT_PART: after the call, its exit status, whether the command ran, what it printed
  local want_rc=$1 want_ran=$2 want_out=$3 out rc ran=no
  rm -f "$tmp/ran"
  out=$(PATH="$tmp:/usr/bin:/bin" bash "$script" sh -c "touch '$tmp/ran'; exit 7" 2>&1)
  rc=$?
  [ -e "$tmp/ran" ] && ran=yes
  if [ "$rc" != "$want_rc" ] || [ "$ran" != "$want_ran" ] || [[ "$out" != *"$want_out"* ]]; then
    echo "FAIL: rc $rc (want $want_rc), ran $ran (want $want_ran), output '$out' (want '$want_out')"
    fail=1
  fi
}
card "NVIDIA H200"
expect 7 yes ""
card "NVIDIA H100 80GB HBM3"
expect 3 no "the card is 'NVIDIA H100 80GB HBM3', not an H200"
card ""
expect 3 no "the card is 'none'"
out=$(bash "$script" 2>&1)
rc=$?
if [ "$rc" != 2 ] || [[ "$out" != *usage* ]]; then
  echo "FAIL: no command -> rc $rc, '$out' (want rc 2 and the usage)"
  fail=1
fi
[ "$fail" -eq 0 ] && echo "device-if-h200: ok"
exit "$fail"
