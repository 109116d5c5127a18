#!/usr/bin/env bash
# On the GPU machine (device tool): run the command given only when the card is an H200, whose figures issue 7's bars
# are; on any other card print its name and exit 3 at once. A call that names the H200 kind may be lent an H100, and
# such a call then costs seconds of device time instead of a whole check (seventy-eighth session: 0.3 s, ~30 s of
# budget with the start). Usage: bash scripts/device-if-h200.sh CMD [ARG ...]
#   e.g. bash scripts/device-if-h200.sh bash scripts/device-check.sh --prebuilt .device-bin.tar.xz
set -uo pipefail
[ $# -gt 0 ] || { echo "usage: $0 CMD [ARG ...]" >&2; exit 2; }
name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
if [[ "$name" != *H200* ]]; then
  echo "device-if-h200: the card is '${name:-none}', not an H200: nothing run"
  exit 3
fi
exec "$@"
