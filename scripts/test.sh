#!/usr/bin/env bash
# Sets up a fresh machine, builds everything (CUDA sources too when nvcc is present) and runs the whole
# test suite. GPU tests skip themselves when no GPU is present. This is what .ci/run calls.
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache keys on the compile commands, which hold this checkout's absolute path; relative to it, a fresh clone in
# another directory reuses the objects of an earlier build of the same sources.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
./scripts/setup.sh
BUILD=${BUILD_DIR:-build}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
cd "$BUILD"
ctest --output-on-failure -j"$(nproc)" --timeout 600
