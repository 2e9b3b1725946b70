#!/bin/bash
# warm.sh DRIVER BUILD TAG : a fresh server on a fresh copy, one catch-up to warm it, then 4 measured catch-ups
drv=$1; build=$2; tag=$3
bin=/tmp/c9/syncgo-base; [ $build = b ] && bin=/tmp/c9/syncgo-b; [ $build = b1 ] && bin=/tmp/c9/syncgo-b1
tool=/tmp/c9/syncgo-base
out=/tmp/c9/runs/warm-$drv-$tag-$build
port=18120
if [ $drv = sqlite ]; then
  rm -f /tmp/c9/runw.db*; cp /tmp/c9/seed-sqlite.db /tmp/c9/runw.db
  db=/tmp/c9/runw.db
else
  dropdb -h 127.0.0.1 -U postgres --if-exists c9_runw >/dev/null 2>&1
  createdb -h 127.0.0.1 -U postgres -T c9_tpl c9_runw
  sleep 3
  db='postgres://postgres@127.0.0.1:5432/c9_runw?sslmode=disable'
fi
$bin serve -listen 127.0.0.1:$port -db "$db" > $out.serve.log 2>&1 &
pid=$!
for i in $(seq 100); do curl -sf http://127.0.0.1:$port/readyz >/dev/null && break; sleep 0.1; done
cpu_of() { local s=0; for p in "$@"; do [ -r /proc/$p/stat ] && s=$((s + $(awk '{print $14+$15}' /proc/$p/stat))); done; echo $s; }
bpids() { pgrep -f "postgres: 15/main: postgres c9_runw" | tr '\n' ' '; }
$tool bench -url http://127.0.0.1:$port -workload catchup -seeded -scope c9 -quiet -json $out-0.json > /dev/null 2>&1
for r in 1 2 3 4; do
  load=$(cut -d' ' -f1 /proc/loadavg)
  b0=0; [ $drv = pg ] && { bp=$(bpids); b0=$(cpu_of $bp); }
  $tool bench -url http://127.0.0.1:$port -workload catchup -seeded -scope c9 -quiet -json $out-$r.json -pid $pid > /dev/null 2>&1
  bcpu=""; [ $drv = pg ] && { bp2=$(bpids); b1=$(cpu_of $bp2); bcpu=$(echo "scale=3; ($b1 - $b0)/100" | bc); }
  wall=$(jq -r '.figures[] | select(.name=="catch-up time") | .value' $out-$r.json)
  scpu=$(jq -r '.figures[] | select(.name|test("server CPU")) | .value' $out-$r.json)
  tcpu=$(jq -r '.figures[] | select(.name=="bench tool CPU time") | .value' $out-$r.json)
  n=$(jq -r '.figures[] | select(.name=="commits caught up") | .value' $out-$r.json)
  echo "warm $drv $tag-$r $build load=$load wall=$wall server=$scpu tool=$tcpu backends=$bcpu commits=$n" | tee -a /tmp/c9/runs/warm-log.txt
done
kill $pid; wait $pid 2>/dev/null
