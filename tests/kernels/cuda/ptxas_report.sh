#!/usr/bin/env bash
# Compiles one CUDA source to a cubin with ptxas's verbose report and keeps the report (registers, spills, and the
# wgmma pipeline advisories that ptxas_wgmma_check.sh reads). CMake runs it beside the normal build.
# Usage: ptxas_report.sh LOG NVCC ARGS...
set -uo pipefail
log=$1
shift
mkdir -p "$(dirname "$log")"
if ! "$@" -Xptxas -v >"$log.tmp" 2>&1; then
  cat "$log.tmp" >&2
  exit 1
fi
mv "$log.tmp" "$log"
