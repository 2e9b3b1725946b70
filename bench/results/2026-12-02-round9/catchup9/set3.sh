#!/bin/bash
# set3.sh NAME ROUNDS DRIVERS... : a, b1, b in rotating order
name=$1; rounds=$2; shift 2
orders=("a b1 b" "b a b1" "b1 b a")
for i in $(seq $rounds); do
  o=${orders[$(( (i-1) % 3 ))]}
  for d in "$@"; do
    for b in $o; do /tmp/c9/run.sh $d $b $name-$i; done
  done
done
echo done
