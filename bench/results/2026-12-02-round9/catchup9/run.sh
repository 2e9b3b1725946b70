#!/bin/bash
# run.sh DRIVER BUILD TAG : one catch-up on a fresh copy with a fresh server
# DRIVER sqlite|pg, BUILD a|b (a = main at the branch point, b = branch)
drv=$1; build=$2; tag=$3
bin=/tmp/c9/syncgo-base; [ $build = b ] && bin=/tmp/c9/syncgo-b; [ $build = b1 ] && bin=/tmp/c9/syncgo-b1
tool=/tmp/c9/syncgo-base
out=/tmp/c9/runs/$drv-$tag-$build
port=18110
if [ $drv = sqlite ]; then
  rm -f /tmp/c9/run.db*; cp /tmp/c9/seed-sqlite.db /tmp/c9/run.db
  db=/tmp/c9/run.db
else
  dropdb -h 127.0.0.1 -U postgres --if-exists c9_run >/dev/null
  createdb -h 127.0.0.1 -U postgres -T c9_tpl c9_run
  sleep 3
  db='postgres://postgres@127.0.0.1:5432/c9_run?sslmode=disable'
fi
pfx=""; [ -n "$NICE" ] && pfx="nice -n -10"
$pfx $bin serve -listen 127.0.0.1:$port -admin-listen 127.0.0.1:18111 -db "$db" > $out.serve.log 2>&1 &
pid=$!
for i in $(seq 100); do curl -sf http://127.0.0.1:$port/readyz >/dev/null && break; sleep 0.1; done
cpu_of() { # sum utime+stime (ticks) of pids
  local s=0; for p in "$@"; do [ -r /proc/$p/stat ] && s=$((s + $(awk '{print $14+$15}' /proc/$p/stat))); done; echo $s; }
bpids() { psql -h 127.0.0.1 -U postgres -Atc "select pid from pg_stat_activity where datname='c9_run'" 2>/dev/null; }
load=$(cut -d' ' -f1 /proc/loadavg)
if [ $drv = pg ]; then before=$(bpids | tr '\n' ' '); b0=$(cpu_of $before); fi
if [ -n "$NICE" ] && [ $drv = pg ]; then ( for i in $(seq 200); do for p in $(pgrep -f "postgres: postgres c9_run"); do renice -n -10 -p $p >/dev/null 2>&1; done; sleep 0.02; done ) & rn=$!; sleep 0.1; fi
$pfx $tool bench -url http://127.0.0.1:$port -workload catchup -seeded -scope c9 -quiet -json $out.json -pid $pid > $out.txt 2>&1
[ -n "$rn" ] && kill $rn 2>/dev/null
if [ $drv = pg ]; then after=$(bpids | tr '\n' ' '); 
  # backends of the run: those alive now; those alive before count from their earlier value
  b1=$(cpu_of $after); bcpu=$(echo "scale=3; ($b1 - $b0)/100" | bc); echo "$before | $after" > $out.pids; else bcpu=""; fi
ra=$(curl -s http://127.0.0.1:18111/metrics | grep "^syncgo_pull_read_ahead_total" | sed -E 's/.*result="([a-z]+)"} /\1=/' | tr '\n' ' ')
kill $pid; wait $pid 2>/dev/null
wall=$(jq -r '.figures[] | select(.name=="catch-up time") | .value' $out.json)
scpu=$(jq -r '.figures[] | select(.name|test("server CPU")) | .value' $out.json)
tcpu=$(jq -r '.figures[] | select(.name=="bench tool CPU time") | .value' $out.json)
n=$(jq -r '.figures[] | select(.name=="commits caught up") | .value' $out.json)
echo "$drv $tag $build nice=${NICE:-0} load=$load wall=$wall server=$scpu tool=$tcpu backends=$bcpu commits=$n $ra" | tee -a /tmp/c9/runs/log.txt
