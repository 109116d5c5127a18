#!/usr/bin/env bash
# The CPU test suite under the compiler's sanitizers, in builds of their own (CUDA sources off; the GPU tests
# have scripts/device-sanitize.sh): AddressSanitizer with LeakSanitizer and UndefinedBehaviorSanitizer (every
# report fatal, float-to-int overflow included), then ThreadSanitizer (its reports sorted by tools/tsan_triage.py).
# Not part of .ci/run: each build takes ~15 min on two cores (ccache makes the next ones short), and the suite ~4 min under ASan.
# Usage: scripts/sanitize.sh [address|thread ...] [-- CTEST_ARGS...]   (default: both; e.g. -- -R 'Server|Engine')
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
kinds=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do kinds+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ ${#kinds[@]} -gt 0 ] || kinds=(address thread)
./scripts/setup.sh
status=0
for kind in "${kinds[@]}"; do
  case "$kind" in
    address) flags="-fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all -fno-omit-frame-pointer" ;;
    thread) flags="-fsanitize=thread" ;;
    *) echo "sanitize: unknown kind '$kind' (expected address or thread)" >&2; exit 2 ;;
  esac
  dir="build-$kind"
  cmake -S . -B "$dir" -DMOESERVE_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS="$flags" >/dev/null
  cmake --build "$dir" -j"$(nproc)"
  echo "== $kind sanitizer: ctest in $dir =="
  # ASan/UBSan: a report ends the test with an error. TSan: reports go to files, and tools/tsan_triage.py fails
  # the run on those in our code; the ones between two accesses inside libcpp-httplib (not built with TSan, so
  # its synchronization is invisible) are listed, not counted.
  if [ "$kind" = thread ]; then rm -rf "$dir/tsan-reports" && mkdir -p "$dir/tsan-reports"; fi
  ( cd "$dir" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
      TSAN_OPTIONS="exitcode=0 second_deadlock_stack=1 log_path=$PWD/$dir/tsan-reports/report" \
      ctest --output-on-failure -j"$(nproc)" --timeout 1200 "$@" ) || status=1
  if [ "$kind" = thread ]; then
    shopt -s nullglob
    reports=("$dir"/tsan-reports/report.*)
    python3 tools/tsan_triage.py --ours "$PWD/" "${reports[@]}" || status=1
  fi
done
exit $status
