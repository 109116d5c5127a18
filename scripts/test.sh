#!/usr/bin/env bash
# Sets up a fresh machine, builds everything (CUDA sources too when nvcc is present) and runs the whole
# test suite. GPU tests skip themselves when no GPU is present. This is what .ci/run calls.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
BUILD=${BUILD_DIR:-build}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
cd "$BUILD"
ctest --output-on-failure -j"$(nproc)" --timeout 600
