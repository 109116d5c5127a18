#!/usr/bin/env bash
# On the GPU machine, last in a device call: the device tool brings back at most 8 files from $OUT, so when there
# are more, every file but earlier archives goes into one archive $OUT/logs-N.tar.xz (here: tar xJf it). Running it
# again in the same call packs what came since into the next N.
set -euo pipefail
OUT=${OUT:-$PWD/device-out}
[ -d "$OUT" ] || exit 0
n=$(find "$OUT" -type f | wc -l)
[ "$n" -le 8 ] && exit 0
cd "$OUT"
i=1
while [ -e "logs-$i.tar.xz" ]; do i=$((i + 1)); done
list=$(mktemp)
find . -type f ! -name 'logs-*.tar.xz' | sort >"$list"
tar cJf "logs-$i.tar.xz" -T "$list"
xargs -d '\n' rm -f <"$list"
rm -f "$list"
find . -mindepth 1 -type d -empty -delete
echo "pack-out: $(wc -c <"logs-$i.tar.xz") bytes in \$OUT/logs-$i.tar.xz ($n files; the device tool returns at most 8)"
