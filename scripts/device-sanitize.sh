#!/usr/bin/env bash
# On the GPU machine (device tool): the GPU tests under compute-sanitizer, for what the differential tests cannot
# see: out-of-bounds or misaligned device accesses (memcheck), shared-memory races (racecheck), barrier misuse
# (synccheck) and reads of device memory never written (initcheck). The tests poison outputs and compare every
# element, so a wrong result already fails them; these tools find accesses that happen to give right results.
# Prints one row per run (tool, filter, tests passed, the sanitizer's summary) and keeps each log under $OUT.
# Usage: bash scripts/device-sanitize.sh --prebuilt DIR|FILE.tar.xz [TOOL=GTEST_FILTER ...]
#   Default runs: the table below. SANITIZE_BUDGET (seconds, default 540) bounds the whole script: each run gets what
#   is left (at most SANITIZE_RUN_MAX, default 200) and a run cut short is reported as such, with the tests it finished
#   and the findings it printed (SANITIZE_PRINT_LIMIT per run, default 40: racecheck reports each byte of a hazard).
#   SANITIZE_BINARY: the test binary of the prebuilt set (default test_gpu; a VARIANTS build's test_gpu_NAME).
#   Needs a Firecracker machine: on gVisor compute-sanitizer refuses the device (library's KINDS.md).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=scripts/prebuilt-env.sh
source scripts/prebuilt-env.sh
device_script_start "--prebuilt DIR|FILE.tar.xz [TOOL=GTEST_FILTER ...]" "$@"
shift 2
export NCCL_NVLS_ENABLE=0
TEST_BIN=${SANITIZE_BINARY:-test_gpu}  # e.g. test_gpu_NAME of a VARIANTS build
[ -x "$BIN/$TEST_BIN" ] || { echo "device-sanitize: no $TEST_BIN in $BIN" >&2; exit 1; }
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
[ -x "$CS" ] || { echo "device-sanitize: compute-sanitizer not found" >&2; exit 1; }
"$CS" --version | tail -1

# racecheck and synccheck on the kernels with hand-written shared-memory pipelines (mbarriers, TMA, wgmma) and
# block-wide exchanges, at the tests' small shapes; memcheck over everything but the tests that provoke CUDA errors on
# purpose (CudaErrors: OOM and a bad launch, which the tool would report as API errors) and the whole-engine and
# V4-Flash-shaped runs, whose many large launches the tool would slow past the budget. racecheck in three runs, so
# that one slow test cannot hide the rest (its first call spent 150 s in one W4A8 test and 113 s in
# CudaAttention.SparseAttentionWithSinks). racecheck and synccheck take the W4A8 GEMM tests' configs
# named by SANITIZE_W4A8_CONFIGS (default: a decode, a 64-token and a prefill config; empty: all of them).
W4A8='MoeW4A8Gpu.GemmLayoutProbe:MoeW4A8Gpu.GemmFlashW2ManyTokenTiles:MoeW4A8Gpu.GemmLargeExponentSpread'
W4A8+=':MoeW4A8Gpu.DecodeChain*:CudaMoe.*:CudaMoeFp8OneToken.*'
REST='CudaKv.*:CudaGemm.OneBatchGemv*:CudaGemm.StreamingGemvOneRow:CudaGemm.Skinny*:CudaSampling.*:CudaOps.*'
ATTN='CudaAttention.*'
# Ordered by what is least known (fifty-second session: memcheck finished 43 of 69 tests, initcheck never ran,
# racecheck of attention 1 test; synccheck and racecheck of the rest were clean), so that a short budget spends
# itself there first.
runs=("memcheck=*-CudaErrors.*:ServeCuda.*:DummyEngine.*:GpuDummy.*"
  "initcheck=CudaOps.*:CudaKv.*:CudaAttention.*:MoeW4A8Gpu.*:CudaGemm.OneBatchGemv*"
  "racecheck=$ATTN" "racecheck=$W4A8" "racecheck=$REST" "synccheck=$W4A8:$REST:$ATTN")
w4a8_configs=${SANITIZE_W4A8_CONFIGS-bn8_wg1_g2_s5,bn64_wg2_g1_s8,bn128_wg2_g1_s5_pf}
[ $# -gt 0 ] && runs=("$@")

budget=${SANITIZE_BUDGET:-540}
run_max=${SANITIZE_RUN_MAX:-200}
start=$(date +%s)
rows=()
i=0
for r in "${runs[@]}"; do
  tool=${r%%=*}
  filter=${r#*=}
  i=$((i + 1))
  left=$((budget - ($(date +%s) - start)))
  if [ "$left" -lt 20 ]; then
    rows+=("$tool|skipped|budget spent|$filter")
    continue
  fi
  t=$((left < run_max ? left : run_max))
  log="$OUT/sanitize-$i-$tool.log"
  extra=()
  [ "$tool" = racecheck ] && extra=(--racecheck-report all)
  limit=()
  [[ "$tool" == racecheck || "$tool" == synccheck ]] && limit=(env MOESERVE_TEST_W4A8_CONFIGS="$w4a8_configs")
  # racecheck reports WAR hazards on the W4A8 GEMM's stage release (lane 0 arriving for its warp after __syncwarp)
  # at the weights' bulk copies, none with every consumer thread arriving (fifty-sixth session), so its runs take the
  # every-thread form; SANITIZE_W4A8_LANE0_RELEASE=1 keeps main's. The other tools run main's form. (initcheck's wrong
  # outputs in the 8-token configs, in either form, were scale loads the stage release did not wait for: fixed in the
  # fifty-ninth session, moe-w4a8.md.)
  [ "$tool" = racecheck ] && [ "${SANITIZE_W4A8_LANE0_RELEASE:-0}" != 1 ] &&
    limit+=(env MOESERVE_W4A8_EVERY_THREAD_RELEASES=1)
  # racecheck takes minutes per attention case at prefill-chunk sizes (seventy-eighth session: 170 s did not finish
  # one), so its runs take each attention test's smallest cases; SANITIZE_ATTENTION_ALL_CASES=1 keeps them all.
  [ "$tool" = racecheck ] && [ "${SANITIZE_ATTENTION_ALL_CASES:-0}" != 1 ] &&
    limit+=(env MOESERVE_TEST_ATTENTION_CASES=few)
  # --error-exitcode tells the tool's findings apart from a test failure (gtest exits 1) and a timeout (124).
  timeout "$t" "${limit[@]}" "$CS" --tool "$tool" "${extra[@]}" --print-limit "${SANITIZE_PRINT_LIMIT:-40}" \
    --error-exitcode 86 \
    "$BIN/$TEST_BIN" --gtest_filter="$filter" >"$log" 2>&1
  rc=$?
  passed=$(grep -c '^\[       OK \]' "$log")
  failed=$(grep -cE '^\[  FAILED  \] .* \([0-9]+ ms\)' "$log")
  skipped=$(grep -cE '^\[  SKIPPED \] .* \([0-9]+ ms\)' "$log")
  summary=$(grep -E '(ERROR|RACECHECK|SYNCCHECK|INITCHECK) SUMMARY' "$log" | tail -1 | sed 's/^=* *//')
  # Findings printed so far count even when the run was cut (a cut run's summary line never comes).
  finding='^=+ +(Invalid|Race|Barrier|Uninitialized|Error|Warning)'  # the first line of each report
  found=$(grep -cE "$finding" "$log")
  case $rc in
    0) verdict=clean ;;
    86) verdict=FINDINGS ;;
    124) verdict="cut at ${t}s" ;;
    *) verdict="rc=$rc" ;;
  esac
  if [ "$rc" != 86 ] && [ "$found" -gt 0 ]; then
    [ "$rc" = 0 ] && verdict="rc=0"  # printed findings with exit 0 (warnings?): never "clean"
    verdict="FINDINGS, $verdict"
  fi
  rows+=("$tool|$verdict|$passed ok, $failed failed, $skipped skipped; ${summary:-no summary}; $found printed|$filter")
  # The first finding, for the call's output (the log keeps up to SANITIZE_PRINT_LIMIT): what, where, which launch.
  if [ "$found" -gt 0 ]; then
    grep -m 1 -A 3 -E "$finding" "$log" | cut -c1-200
    grep -m 2 -E 'Host Frame:.*(launch_cfg|Test::TestBody)' "$log" | sed 's/^=* *Host Frame: *//' | cut -c1-200
  fi
done
echo
echo "== device-sanitize ($(date -u +%F), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)) =="
for r in "${rows[@]}"; do
  echo "$r" | awk -F'|' '{printf "%-10s %-12s %s [%.40s]\n", $1, $2, $3, $4}'
done
bash scripts/pack-out.sh
