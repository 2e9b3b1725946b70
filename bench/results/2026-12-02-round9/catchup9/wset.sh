#!/bin/bash
name=$1; pairs=$2; shift 2
for i in $(seq $pairs); do
  for d in "$@"; do
    if [ $((i % 2)) = 1 ]; then o="a b"; else o="b a"; fi
    for b in $o; do /tmp/c9/warm.sh $d $b $name-$i; done
  done
done
echo done
