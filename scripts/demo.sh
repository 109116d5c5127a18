#!/usr/bin/env bash
# Sets up a fresh machine, builds moeserve and serves the built-in demo model on http://127.0.0.1:30000
# (extra arguments go to `moeserve serve`, e.g. --port 8000 --speculative-algorithm mtp).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
BUILD=${BUILD_DIR:-build}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target moeserve
exec "$BUILD/moeserve" serve --served-model-name demo "$@"
