package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncgo/syncgo/internal/binarytest"
	"github.com/syncgo/syncgo/internal/pgtest"
)

// TestSoakShort is the soak's short mode: about 25 s of mixed load with
// SIGKILLs, dropped sockets and (on Postgres, a fleet of two) terminated
// backends, then the invariant checks. It runs only with SYNCGO_SOAK=1:
// it takes about a minute per driver and loads the machine.
func TestSoakShort(t *testing.T) {
	if os.Getenv("SYNCGO_SOAK") == "" {
		t.Skip("SYNCGO_SOAK is not set: skipping the short soak (about a minute per driver)")
	}
	bin := binarytest.Build(t)
	t.Run("sqlite", func(t *testing.T) {
		shortSoak(t, bin, filepath.Join(t.TempDir(), "soak.db"), 1)
	})
	t.Run("postgres", func(t *testing.T) {
		shortSoak(t, bin, pgtest.Schema(t, "soak", true), 2)
	})
}

func shortSoak(t *testing.T, bin, db string, instances int) {
	cfg := config{bin: bin, db: db, instances: instances, out: t.TempDir(),
		secret:   "soak-test-secret-soak-test-secret-0123456",
		duration: 25 * time.Second, clients: 30, tenants: 3, projects: 4, sockets: 0.5,
		think: 300 * time.Millisecond, reinstall: true, faults: true,
		killEvery: 8 * time.Second, terminateEvery: 6 * time.Second, dropEvery: 3 * time.Second,
		settle: time.Minute, quiet: 5 * time.Second, seed: time.Now().UnixNano()}
	cfg.defaults()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := soak(ctx, cfg, t.Output())
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	rep.write(&b)
	t.Log("seed ", cfg.seed, "\n", b.String())
	if rep.Applied == 0 || rep.FaultCounts["sigkill"] == 0 {
		t.Errorf("the soak acknowledged %d commits and injected %d SIGKILLs: too little to check anything", rep.Applied, rep.FaultCounts["sigkill"])
	}
	if len(rep.Violations) > 0 {
		t.Errorf("%d invariants violated (logs under %s)", len(rep.Violations), cfg.out)
	}
}

// TestCutByFault: which client errors the report puts down to a fault.
// A response cut short counts only within cutWindow of a SIGKILL or a
// socket drop; a refused connection within faultWindow of a kill or a
// restart or a deploy; nothing is put down to a Postgres fault, and no
// body cut short (a truncated message) to a deploy's graceful stop.
func TestCutByFault(t *testing.T) {
	faults := []fault{
		{At: 10 * time.Second, Kind: "sigkill"},
		{At: 14 * time.Second, Kind: "restarted"},
		{At: 60 * time.Second, Kind: "pg_terminate_backend"},
		{At: 100 * time.Second, Kind: "deploy"},
	}
	for _, c := range []struct {
		kind string
		at   time.Duration
		want bool
	}{
		{"EOF", 10*time.Second + 400*time.Millisecond, true},
		{"sspclient: response: sync.invalid_request: truncated message: SEGMENT_INLINE frame payload", 9500 * time.Millisecond, true},
		{"connection reset by peer", 20 * time.Second, false},
		{"EOF", 61 * time.Second, false},
		{"connection refused", 25 * time.Second, true},
		{"connection refused", 35 * time.Second, false},
		{"connection refused", 61 * time.Second, false},
		{"connection refused", 101 * time.Second, true},
		{"connection reset by peer", 102 * time.Second, true},                                                                    // a request racing the close of an idle connection
		{"sspclient: response: sync.invalid_request: truncated message: SEGMENT_INLINE frame payload", 102 * time.Second, false}, // a graceful stop cuts no body
	} {
		if got := cutByFault(faults, c.kind, c.at); got != c.want {
			t.Errorf("%q at %s: put down to a fault %v, want %v", c.kind, c.at, got, c.want)
		}
	}
}
