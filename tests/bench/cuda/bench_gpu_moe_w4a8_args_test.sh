#!/usr/bin/env bash
# bench_gpu_moe_w4a8's argument errors, with or without a GPU: exit 2 and a line naming the argument, before any
# device work (a device call should not spend its minutes finding a typo).
# Usage: bench_gpu_moe_w4a8_args_test.sh BENCH_BINARY
set -uo pipefail
bin=$1
fail=0
expect() {  # expect MESSAGE ARGS...: exit status 2 and MESSAGE on stderr
  local msg=$1 err rc
  shift
  err=$("$bin" "$@" 2>&1 >/dev/null)
  rc=$?
  if [ "$rc" -ne 2 ] || [[ "$err" != *"$msg"* ]]; then
    echo "FAIL: $* -> rc $rc, stderr '$err' (expected rc 2 and '$msg')"
    fail=1
  fi
}
expect "unknown argument '--bogus'" --bogus
expect "--no-peer and --peer-only exclude each other" --no-peer --peer-only
expect "--no-peer and --peer-only exclude each other" --peer-only --decode 1 --no-peer
[ "$fail" -eq 0 ] && echo "bench_gpu_moe_w4a8 argument errors: ok"
exit "$fail"
