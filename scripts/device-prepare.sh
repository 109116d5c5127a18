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
# build_variant NAME COMMIT DIRS TARGETS: TARGETS built with COMMIT's DIRS and copied into .device-bin as
# TARGET_NAME. The extracted files get the current time, so every object is rebuilt (ccache serves the unchanged
# ones) and none built from another version is reused; the tree's DIRS come back afterwards (on any exit, a failed
# build included), and the files that differ from COMMIT's are touched for the same reason.
VARIANT_SAVED="" VARIANT_DIRS="" VARIANT_CHANGED=""
restore_variant() {
  [ -n "$VARIANT_SAVED" ] || return 0
  for d in $VARIANT_DIRS; do rm -rf "$d" && cp -a "$VARIANT_SAVED/$d" .; done
  rm -rf "$VARIANT_SAVED"
  VARIANT_SAVED=""
  for f in $VARIANT_CHANGED; do touch -c "$f"; done
}
# The PROBES loop's source edit (below), undone the same way on any exit.
PROBE_FILE=src/kernels/cuda/moe_w4a8_gemm.cu PROBE_SAVED=""
restore_probe() {
  [ -n "$PROBE_SAVED" ] || return 0
  cp "$PROBE_SAVED" "$PROBE_FILE" && touch "$PROBE_FILE" && rm -f "$PROBE_SAVED"
  PROBE_SAVED=""
}
trap 'restore_variant; restore_probe' EXIT
# COMMIT may instead be a patch file (scripts/pending/*.patch: experiments kept in the tree, since unmerged branches
# do not outlive a session's checkout): the patch is applied to the tree's DIRS, which come back the same way.
build_variant() {
  local name=$1 commit=$2 d t
  VARIANT_DIRS=$3
  VARIANT_SAVED=$(mktemp -d)
  for d in $VARIANT_DIRS; do cp -a "$d" "$VARIANT_SAVED/"; done
  if [[ "$commit" == *.patch ]]; then
    VARIANT_CHANGED=$(git apply --numstat "$commit" | cut -f3)
    for f in $VARIANT_CHANGED; do  # only DIRS come back afterwards
      [[ " $VARIANT_DIRS " == *" ${f%%/*} "* ]] ||
        { echo "device-prepare: $commit changes $f, outside $VARIANT_DIRS" >&2; exit 1; }
    done
    git apply "$commit"  # the patched files get the current time; the others keep their objects
  else
    VARIANT_CHANGED=$(git diff --name-only "$commit" -- $VARIANT_DIRS)
    for d in $VARIANT_DIRS; do rm -rf "$d"; done
    git archive "$commit" $VARIANT_DIRS | tar xm  # m: now as mtime, newer than any object of another version
  fi
  cmake --build "$BUILD" -j"$(nproc)" --target $4
  for t in $4; do cp "$BUILD/$t" ".device-bin/${t}_$name"; done
  restore_variant
}
# BASELINE=COMMIT: also bench_gpu_ops_base and bench_gpu_moe_w4a8_base, built with COMMIT's src/ (for
# scripts/device-ab.sh's NAME@bench_gpu_ops_base, and kernel A/B runs).
if [ -n "${BASELINE:-}" ]; then build_variant base "$BASELINE" src "bench_gpu_ops bench_gpu_moe_w4a8"; fi
# VARIANTS="NAME=COMMIT|PATCH ...": for each, test_gpu_NAME, bench_gpu_ops_NAME and bench_gpu_moe_w4a8_NAME built
# with COMMIT's src/, tests/ and bench/, or the tree's with PATCH applied (unmerged work verified in the same device
# call: NAME@bench_gpu_ops_NAME in scripts/device-ab.sh).
for v in ${VARIANTS:-}; do
  build_variant "${v%%=*}" "${v#*=}" "src tests bench" "test_gpu bench_gpu_ops bench_gpu_moe_w4a8"
done
# PROBES="2 4 7": also bench_gpu_moe_w4a8_pN, its GEMM built with probe N (MOESERVE_W4A8_PROBE in moe_w4a8_gemm.cu:
# bits 1-8 ablations, timing only, the outputs wrong, moe-w4a8.md forty-first session; bit 16 the per-CTA timeline that
# `--timeline` prints, forty-fourth session; bit 32 random sleeps at the pipeline's hand-over points, outputs right,
# 64 the stage check (outputs right; each group's shared-memory bytes against their source, counts printed per
# launch), fifty-eighth session; 128 the stage release after the next group's wgmma issue (outputs right), fifty-ninth
# session: with bits 32, 64 and 128, test_gpu_pN too).
for n in ${PROBES:-}; do
  PROBE_SAVED=$(mktemp)
  cp "$PROBE_FILE" "$PROBE_SAVED"
  sed -i "s/^#define MOESERVE_W4A8_PROBE 0$/#define MOESERVE_W4A8_PROBE $n/" "$PROBE_FILE"
  grep -q "^#define MOESERVE_W4A8_PROBE $n$" "$PROBE_FILE"
  targets=bench_gpu_moe_w4a8
  if (( n & 224 )); then targets="$targets test_gpu"; fi
  cmake --build "$BUILD" -j"$(nproc)" --target $targets
  for t in $targets; do cp "$BUILD/$t" ".device-bin/${t}_p$n"; done
  restore_probe
done
pwd > .device-bin/source_dir  # the binaries read fixtures and models/ under the path they were built in
# PACK_ONLY="test_gpu bench_gpu_ops ...": only those binaries (and the libraries) go into the tarball. With variants
# the whole set packs to ~32 MB, which with the tracked tree (~38 MB, the demo model most of it) passes the device
# tool's 64 MiB carry limit; pack one call's binaries per tarball then (`tar cJf NAME.tar.xz -C .device-bin ...` by
# hand for a second one: /.device-*.tar.xz is ignored like this one).
files=$(cd .device-bin && if [ -n "${PACK_ONLY:-}" ]; then echo $PACK_ONLY lib* source_dir; else echo .; fi)
(cd .device-bin && tar cJf ../.device-bin.tar.xz $files)
du -sh .device-bin .device-bin.tar.xz
# What a call carrying the tarball sends: tracked files, untracked ones git does not ignore, and the tarball.
sent=$(( $( (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 -r stat -c %s -- 2>/dev/null |
          awk '{s += $1} END {print s + 0}') + $(stat -c %s .device-bin.tar.xz) ))
echo "a device call carrying .device-bin.tar.xz sends $((sent >> 20)) MiB (limit 64)"
if [ "$sent" -gt $((64 << 20)) ]; then
  echo "device-prepare: over the device tool's 64 MiB: that call would be refused; PACK_ONLY=\"BINARIES\" packs fewer" >&2
fi
