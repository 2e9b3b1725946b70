package storetest

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/syncgo/syncgo/store"
)

// faultEnv names a fault for the memory store to inject (see faults).
const faultEnv = "STORETEST_MEM_FAULT"

func openMem(t testing.TB) store.Store {
	s := newMemStore()
	s.fault = os.Getenv(faultEnv)
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
			t.Error(err)
		}
	})
	return s
}

// TestMemStore runs the suite against the in-memory store.
func TestMemStore(t *testing.T) {
	Run(t, openMem)
}

func BenchmarkMemStore(b *testing.B) {
	BenchmarkAppend(b, openMem)
}

// faults are bugs the memory store can be told to have, each with the
// area of the suite that must catch it.
var faults = []struct{ name, area string }{
	{"schema-newer-accepted", "Schema"},
	{"layout-unchecked", "Schema"},
	{"touch-resets-epoch", "Partitions"},
	{"rollback-keeps-seq", "Append"},
	{"candidate-keeps-writes", "Rows"},
	{"no-tombstones", "Rows"},
	{"scopes-any-key", "Scopes"},
	{"scopes-stale-on-replace", "Scopes"},
	{"scan-utf16-order", "Scopes"},
	{"limit-splits-commits", "Scopes"},
	{"limit-one-commit", "Scopes"},
	{"put-result-overwrites", "PushResults"},
	{"tx-result-invisible", "PushResults"},
	{"advance-backwards", "Clients"},
	{"floor-counts-no-cursor", "Clients"},
	{"rebind-client", "Clients"},
	{"bind-overwrites", "Clients"},
	{"prune-lowers-horizon", "Prune"},
	{"prune-uncapped", "Prune"},
	{"prune-any-epoch", "Prune"},
	{"rotate-keeps-clients", "Epoch"},
	{"failed-write-kept", "Transactions"},
	{"stats-uncounted", "Transactions"},
	{"fence-lowered", "Barrier"},
	{"fence-unchecked", "Barrier"},
	{"redeclare-resets", "Barrier"},
	{"claim-activated", "Barrier"},
	{"stale-owner-advances", "Barrier"},
	{"tx-advance-kept", "Barrier"},
	{"activate-ignores-sources", "Barrier"},
	{"activate-pruned-clean", "Barrier"},
	{"coverage-all-tables", "Barrier"},
	{"gate-all-versions", "Barrier"},
	{"barrier-unchecked", "Barrier"},
	{"bump-keeps-fences", "Barrier"},
	{"physical-unchecked", "Barrier"},
}

// TestSuiteDetectsFaults runs each area against a memory store with one
// injected bug, in a child process, and wants the area to fail: the
// suite's tests can fail.
func TestSuiteDetectsFaults(t *testing.T) {
	if os.Getenv(faultEnv) != "" {
		t.Skip("in a fault run")
	}
	if testing.Short() {
		t.Skip("runs the suite once per fault")
	}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestMemStore$/^"+f.area+"$", "-test.count=1")
			cmd.Env = append(os.Environ(), faultEnv+"="+f.name)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || !strings.Contains(string(out), "--- FAIL") {
				t.Errorf("area %s passed with fault %s (err %v):\n%s", f.area, f.name, err, tail(out))
			}
		})
	}
}

func tail(out []byte) string {
	const n = 2000
	if len(out) > n {
		return "..." + string(out[len(out)-n:])
	}
	return string(out)
}
