# shellcheck shell=bash
# Sourced by the device scripts: the GPU's clocks while a benchmark runs, so that a figure that moves between
# machines (the batch-1 layer measured 141.9 and 148.6 us for the same binary on two H200s) can be read against
# the clocks it ran at. nvidia-smi only reads them (the device tool's rule: leave the GPU's settings as they are).
#   clocks_start FILE   sample SM clock, memory clock, power and temperature every 100 ms into FILE
#   clocks_stop         end the sampling
#   clocks_summary FILE one line: the SM clock's median, min and max in MHz, the median power and temperature,
#                       from the first sample at >= 90 % of the highest SM clock on (the idle samples before the
#                       first kernel read 345 MHz on the H200)
clocks_start() {
  nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv,noheader,nounits -lms 100 \
    >"$1" 2>/dev/null &
  CLOCKS_PID=$!
}
clocks_stop() {
  [ -n "${CLOCKS_PID:-}" ] || return 0
  kill "$CLOCKS_PID" 2>/dev/null
  wait "$CLOCKS_PID" 2>/dev/null
  CLOCKS_PID=""
}
clocks_summary() {
  awk -F', *' 'NF >= 4 && $1 ~ /^[0-9]+$/ { n++; sm[n] = $1; mem[n] = $2; pw[n] = $3; tc[n] = $4 }
    function med(a, n,   i, j, t, b) { for (i = 1; i <= n; i++) b[i] = a[i]
      for (i = 2; i <= n; i++) { t = b[i]; for (j = i - 1; j >= 1 && b[j] > t; j--) b[j + 1] = b[j]; b[j + 1] = t }
      return b[int((n + 1) / 2)] }
    END { if (n == 0) { print "clocks: no samples"; exit }
      top = sm[1]; for (i = 2; i <= n; i++) if (sm[i] > top) top = sm[i]
      s = 1; while (sm[s] < 0.9 * top) s++
      m = 0; for (i = s; i <= n; i++) { m++; sm[m] = sm[i]; mem[m] = mem[i]; pw[m] = pw[i]; tc[m] = tc[i] }
      n = m
      lo = sm[1]; for (i = 2; i <= n; i++) if (sm[i] < lo) lo = sm[i]
      printf "SM clock median %d MHz (min %d, max %d), memory %d MHz, power median %.0f W, %d C; %d samples\n",
        med(sm, n), lo, top, med(mem, n), med(pw, n), med(tc, n), n }' "$1"
}
