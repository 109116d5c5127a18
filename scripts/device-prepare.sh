#!/usr/bin/env bash
# On this (CPU) machine: build the GPU test and benchmark binaries and gather them, with the shared libraries
# the GPU machine's image lacks (Debian's httplib, spdlog, fmt, pcre2, brotli), into .device-bin/ — carry
# that folder with the device call and run `bash scripts/device-check.sh --prebuilt .device-bin` there.
# The binaries are also packed as .device-bin.tar.xz (~5 MB instead of ~30): carry that when the tree plus the
# folder would pass the device tool's 64 MiB carry limit (`--prebuilt .device-bin.tar.xz` unpacks it there).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMOESERVE_CUDA=ON >/dev/null
targets=(test_gpu moeserve)  # the CLI: tools/hf_flash_dummy_peer.py runs `moeserve generate --load-format dummy`
for src in bench/cuda/*.cpp bench/cuda/*.cu; do [ -e "$src" ] && targets+=("$(basename "${src%.*}")"); done
cmake --build "$BUILD" -j"$(nproc)" --target "${targets[@]}"
rm -rf .device-bin && mkdir -p .device-bin
for t in "${targets[@]}"; do cp "$BUILD/$t" .device-bin/; done
for lib in libspdlog.so.1.10 libfmt.so.9 libpcre2-8.so.0 libcpp-httplib.so.0.11 libbrotlidec.so.1 libbrotlienc.so.1 \
           libbrotlicommon.so.1 libdw.so.1 libelf.so.1; do  # libdw/libelf: nsys's QdstrmImporter (device-profile.sh)
  cp -L "/lib/x86_64-linux-gnu/$lib" .device-bin/
done
# BASELINE=COMMIT: also bench_gpu_ops_base and bench_gpu_moe_w4a8_base, built with COMMIT's src/ (for
# scripts/device-ab.sh's NAME@bench_gpu_ops_base, and kernel A/B runs), in the same build tree so that ccache
# serves the unchanged files; src/ is restored after.
if [ -n "${BASELINE:-}" ]; then
  saved=$(mktemp -d)
  cp -a src "$saved/"
  changed=$(git diff --name-only "$BASELINE" -- src)  # the working tree's src/ against COMMIT's
  # On any exit (a failed baseline build included) the tree's src/ comes back and the files that differ are
  # touched: objects built from the baseline's files are newer than the restored ones and would be reused.
  trap 'rm -rf src && cp -a "$saved/src" . && rm -rf "$saved"; for f in $changed; do touch -c "$f"; done' EXIT
  rm -rf src && git archive "$BASELINE" src | tar x
  for f in $changed; do touch -c "$f"; done  # archive times are the commit's: older than the objects
  cmake --build "$BUILD" -j"$(nproc)" --target bench_gpu_ops bench_gpu_moe_w4a8
  cp "$BUILD/bench_gpu_ops" .device-bin/bench_gpu_ops_base
  cp "$BUILD/bench_gpu_moe_w4a8" .device-bin/bench_gpu_moe_w4a8_base
  rm -rf src && cp -a "$saved/src" . && rm -rf "$saved"
  trap - EXIT
  # The restored files keep their times, older than the baseline's objects: touch those that differ, so that
  # the next build recompiles them.
  for f in $changed; do touch -c "$f"; done
fi
pwd > .device-bin/source_dir  # the binaries read fixtures and models/ under the path they were built in
tar cJf .device-bin.tar.xz -C .device-bin .
du -sh .device-bin .device-bin.tar.xz
