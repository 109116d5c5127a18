#!/usr/bin/env bash
# Fails when ptxas serialized the wgmmas of any kernel in the given reports (ptxas_report.sh). A serialized wgmma
# pipeline waits for each wgmma before the next instruction, which cost 12-29 % of a prefill GEMM when it happened
# (docs/benchmarks/moe-w4a8.md), and ptxas reports it only as an "info" line in a verbose build that nobody reads.
# Usage: ptxas_wgmma_check.sh LOG...
set -uo pipefail
status=0
for log in "$@"; do
  if [ ! -s "$log" ]; then
    echo "ptxas_wgmma_check: $log: missing or empty (the ptxas_reports target makes it)"
    status=1
    continue
  fi
  if ! grep -q "Compiling entry function" "$log"; then
    echo "ptxas_wgmma_check: $log: not a ptxas -v report (no 'Compiling entry function' line)"
    status=1
    continue
  fi
  hits=$(grep "wgmma.mma_async instructions are serialized" "$log")
  if [ -n "$hits" ]; then
    echo "ptxas_wgmma_check: $log: wgmmas serialized in:"
    grep -o "function '[^']*'" <<<"$hits" | sed "s/function '\(.*\)'/\1/" | { command -v c++filt >/dev/null && c++filt || cat; } |
      sed 's/^/  /'
    grep -o "(C75[0-9][0-9])[^']*" <<<"$hits" | sort -u | sed 's/^/  reason: /'
    status=1
  else
    echo "ptxas_wgmma_check: $log: $(grep -c "Compiling entry function" "$log") kernels, no serialized wgmma"
  fi
done
exit $status
