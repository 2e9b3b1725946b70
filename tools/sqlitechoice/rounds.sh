#!/bin/bash
# Runs every benchmark of both test binaries in interleaved rounds (-count 1
# per round, alternating which binary goes first), so that a noisy period on
# the shared machine hits every driver instead of all runs of one driver.
# This is how the figures in docs/sqlite-driver.md were taken.
#
#   ./rounds.sh [rounds] > bench.txt && go run ./cmd/medians < bench.txt
#
# Databases go to $TMPDIR (default /tmp), which must be on a real disk.
set -euo pipefail
rounds=${1:-5}
cd "$(dirname "$0")"
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go test -c -o "$bin/purego.test" .
have_cgo=$(go env CGO_ENABLED)
if [ "$have_cgo" = 1 ]; then go test -c -o "$bin/mattn.test" ./mattn; fi
for r in $(seq 1 "$rounds"); do
	echo "# round $r $(date +%T) loadavg $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || true)"
	order="purego mattn"
	if [ $((r % 2)) = 0 ]; then order="mattn purego"; fi
	for t in $order; do
		if [ -x "$bin/$t.test" ]; then
			(cd "${TMPDIR:-/tmp}" && "$bin/$t.test" -test.run '^$' -test.bench . -test.count 1)
		fi
	done
done
