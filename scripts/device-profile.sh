#!/usr/bin/env bash
# On the GPU machine (device tool), after scripts/device-prepare.sh here: profiles for performance work, beside
# (not part of) device-check. Everything lands under $OUT.
# Usage: bash scripts/device-profile.sh --prebuilt .device-bin.tar.xz WHAT...
#   layer[@BINARY]        nsys node-level timeline of the batch-1 4-layer V4-Flash MXFP4 decode graph (FP8 experts
#                         with MOESERVE_LAYER_EXPERTS=fp8)
#                         -> layer_trace.csv (read it here with tools/nsys_timeline.py); @BINARY: that benchmark
#                         of the prebuilt set instead of bench_gpu_ops (e.g. a VARIANTS build) -> layer_BINARY_*;
#                         PROFILE_LAYER_B=8 or 32 in the environment: that batch's graph instead
#   w4a8:SHAPE:T[:CONFIG] ncu (full sections, SASS source counters) of one W4A8 launch at T tokens (decode below
#                         1024 tokens, else prefill), with the dispatch table's config or CONFIG
#                         -> w4a8_SHAPE_T[_CONFIG].txt (details) and ..._sass.csv (per-instruction stalls; read
#                         it here with tools/ncu_sass.py)
#   linear:SHAPE          nsys trace of bench_gpu_ops' linear rows whose shape contains SHAPE (each timed as a graph
#                         of back-to-back launches) -> linear_SHAPE_trace.csv and linear_SHAPE.txt, the launches'
#                         period, duration and lead over their predecessor (tools/nsys_overlap.py)
#   ncu:BENCH_ARGS:REGEX  ncu of the first kernel matching REGEX in `bench_gpu_ops BENCH_ARGS` -> ncu_REGEX.txt
#                         and ncu_REGEX_sass.csv (per-instruction counters and stalls)
# The Nsight Systems CLI bundled with Nsight Compute records a .qdstrm; its QdstrmImporter needs libdw/libelf,
# which device-prepare.sh packs beside the binaries.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=scripts/prebuilt-env.sh
source scripts/prebuilt-env.sh
device_script_start "--prebuilt DIR|FILE.tar.xz WHAT..." "$@"
shift 2
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
NSYS_HOME=$(ls -d /opt/nvidia/nsight-compute/*/host 2>/dev/null | tail -1)
NSYS=$NSYS_HOME/target-linux-x64/nsys
IMPORTER=$(ls "$NSYS_HOME"/linux-desktop-*/QdstrmImporter 2>/dev/null | head -1)

# nsys_trace TAG NSYS_PROFILE_ARGS... -- COMMAND...: COMMAND under `nsys profile --cuda-graph-trace=node` plus the
# given arguments; its output -> $OUT/TAG_bench.log, the kernel trace -> $OUT/TAG_trace.csv (the report itself is
# removed: too large to bring back).
nsys_trace() {
  local tag=$1 args=()
  shift
  while [ "$1" != "--" ]; do args+=("$1"); shift; done
  shift
  rm -f "$OUT/$tag".*
  "$NSYS" profile --cuda-graph-trace=node ${args[@]+"${args[@]}"} -o "$OUT/$tag" -f true "$@" >"$OUT/${tag}_bench.log" 2>&1
  if [ ! -e "$OUT/$tag.nsys-rep" ] && [ -e "$OUT/$tag.qdstrm" ]; then
    "$IMPORTER" -i "$OUT/$tag.qdstrm" >"$OUT/${tag}_import.log" 2>&1
  fi
  "$NSYS" stats -q -r cuda_gpu_trace -f csv -o "$OUT/${tag}_trace" "$OUT/$tag.nsys-rep" >"$OUT/${tag}_stats.log" 2>&1
  mv -f "$OUT/${tag}_trace_cuda_gpu_trace.csv" "$OUT/${tag}_trace.csv" 2>/dev/null
  rm -f "$OUT/$tag".qdstrm "$OUT/$tag".nsys-rep "$OUT/$tag".sqlite
}

# ncu_profile BASE REGEX COMMAND...: ncu (full sections, SASS source counters, clocks as found) of the first kernel
# matching REGEX in COMMAND; its output -> BASE.log, the details page -> BASE.txt, per-instruction counters ->
# BASE_sass.csv (the report itself is removed: too large to bring back).
ncu_profile() {
  local base=$1 regex=$2
  shift 2
  "$NCU" --clock-control none --set full --import-source yes -k "regex:$regex" -c 1 -f -o "$base" "$@" >"$base.log" 2>&1
  "$NCU" -i "$base.ncu-rep" --page details >"$base.txt" 2>&1
  "$NCU" -i "$base.ncu-rep" --page source --csv --print-source sass >"$base"_sass.csv 2>&1
  rm -f "$base.ncu-rep"
}

for what in "$@"; do
  case "$what" in
    layer | layer@*)
      bench=bench_gpu_ops tag=layer
      if [[ "$what" == *@* ]]; then bench=${what#*@} tag=layer_$bench; fi
      MOESERVE_PROFILE_LAYER_B=${PROFILE_LAYER_B:-1} nsys_trace "$tag" --capture-range=cudaProfilerApi -- "$BIN/$bench" layer
      echo "$tag: $(wc -l <"$OUT/${tag}_trace.csv" 2>/dev/null || echo no) trace rows; $(grep -E "B=${PROFILE_LAYER_B:-1} " "$OUT/${tag}_bench.log" | head -2 | tr '\n' ' ')"
      ;;
    linear:*)
      shape=${what#linear:}
      tag=linear_${shape//[^A-Za-z0-9]/_}
      MOESERVE_BENCH_SHAPE="$shape" nsys_trace "$tag" -- "$BIN/bench_gpu_ops" linear
      python3 tools/nsys_overlap.py "$OUT/${tag}_trace.csv" >"$OUT/$tag.txt" 2>&1
      echo "$what:"
      grep -E "^\|" "$OUT/${tag}_bench.log" | cut -c1-120
      head -8 "$OUT/$tag.txt"
      ;;
    w4a8:*)
      IFS=: read -r _ shape T cfg <<<"$what"
      base="$OUT/w4a8_${shape}_${T}${cfg:+_$cfg}"
      phase=(--decode "$T" --prefill -)
      if [ "$T" -ge 1024 ]; then phase=(--decode - --prefill "$T"); fi
      ncu_profile "$base" moe_w4a8_gemm "$BIN/bench_gpu_moe_w4a8" --profile --shape "$shape" "${phase[@]}" \
        ${cfg:+--config "$cfg"}
      echo "$what: $(grep -E 'Duration|DRAM Throughput' "$base.txt" | head -2 | tr -s ' ' | tr '\n' ' ')"
      ;;
    ncu:*)
      IFS=: read -r _ args regex <<<"$what"
      base="$OUT/ncu_${regex//[^A-Za-z0-9_]/_}"
      # shellcheck disable=SC2086
      ncu_profile "$base" "$regex" "$BIN/bench_gpu_ops" $args
      echo "$what: $(grep -E 'Duration' "$base.txt" | head -1 | tr -s ' ')"
      ;;
    *) echo "unknown profile '$what'" >&2 ;;
  esac
done
bash scripts/pack-out.sh  # more than 8 files under $OUT would not all come back
