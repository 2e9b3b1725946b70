package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/store"
)

// syncgo epoch rotate on both drivers: refused while another connection
// has the database open, a "no" rotates nothing, then every partition (or
// only those named) gets a new epoch, requires epochs, and loses its
// client records.
func TestEpochRotate(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		testEpochRotate(t, filepath.Join(t.TempDir(), "restored.db"))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		// A database of its own: the check counts every session of the
		// database, and the other tests share theirs.
		base := pgtest.URL(t)
		var b [6]byte
		_, _ = rand.Read(b[:])
		name := "syncgo_epoch_" + hex.EncodeToString(b[:])
		pgtest.Exec(t, base, "CREATE DATABASE "+name)
		t.Cleanup(func() { pgtest.Exec(t, base, "DROP DATABASE "+name+" WITH (FORCE)") })
		u, err := url.Parse(base)
		if err != nil {
			t.Fatal(err)
		}
		u.Path = "/" + name
		testEpochRotate(t, u.String())
	})
}

func testEpochRotate(t *testing.T, db string) {
	ctx := context.Background()
	st, err := openStore(ctx, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			st.Close()
		}
	}()
	for _, p := range []string{"p1", "p2", "p3"} {
		if _, err := st.TouchPartition(ctx, p, 1000, "old-"+p); err != nil {
			t.Fatal(err)
		}
		if _, err := st.BindClient(ctx, p, store.ClientRecord{ClientID: "c-" + p, ActorID: "a", WireVersion: 3, Cursor: 7, UpdatedAtMs: 1000}); err != nil {
			t.Fatal(err)
		}
	}

	// A store is open (a running server): refused, nothing changes.
	code, _, errOut := run(t, "", "epoch", "rotate", "-db", db, "-yes")
	if code != 1 || !strings.Contains(errOut, "open elsewhere") {
		t.Fatalf("rotate with the database open: exit %d: %s; want 1 and the other connection named", code, errOut)
	}
	wantEpochs(t, st, map[string]string{"p1": "old-p1", "p2": "old-p2", "p3": "old-p3"})
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true

	// Answered no: nothing rotated.
	code, _, errOut = run(t, "n\n", "epoch", "rotate", "-db", db)
	if code != 1 || !strings.Contains(errOut, "nothing rotated") || !strings.Contains(errOut, "3 partition(s)") {
		t.Fatalf("rotate answered no: exit %d: %s", code, errOut)
	}
	// One partition by name, then the rest.
	code, out, errOut := run(t, "y\n", "epoch", "rotate", "-db", db, "-partition", "p2")
	if code != 0 || !strings.Contains(out, `partition "p2": log epoch old-p2 -> `) || strings.Contains(out, "p1") {
		t.Fatalf("rotate p2: exit %d: %s %s", code, out, errOut)
	}
	st2, err := openStore(ctx, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	after := wantEpochs(t, st2, map[string]string{"p1": "old-p1", "p3": "old-p3"})
	rotatedP2 := after["p2"]
	if rotatedP2 == "old-p2" || len(rotatedP2) != 32 {
		t.Fatalf("p2's epoch after its rotation: %q", rotatedP2)
	}
	wantClients(t, st2, map[string]bool{"p1": true, "p2": false, "p3": true})
	st2.Close()

	code, out, errOut = run(t, "", "epoch", "rotate", "-db", db, "-yes")
	if code != 0 || strings.Count(out, "log epoch") != 3 {
		t.Fatalf("rotate all: exit %d: %s %s", code, out, errOut)
	}
	st3, err := openStore(ctx, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st3.Close()
	final := wantEpochs(t, st3, nil)
	for p, e := range final {
		if strings.HasPrefix(e, "old-") || e == rotatedP2 {
			t.Errorf("partition %s kept epoch %q", p, e)
		}
	}
	wantClients(t, st3, map[string]bool{"p1": false, "p2": false, "p3": false})
}

// wantEpochs checks the named partitions' epochs and that every one of
// p1..p3 requires epochs exactly when its epoch is no longer the first;
// it returns every epoch.
func wantEpochs(t *testing.T, st store.Store, want map[string]string) map[string]string {
	t.Helper()
	got := map[string]string{}
	for _, p := range []string{"p1", "p2", "p3"} {
		part, err := st.Partition(context.Background(), p)
		if err != nil {
			t.Fatalf("partition %s: %v", p, err)
		}
		got[p] = part.LogEpoch
		if part.EpochRequired != (part.LogEpoch != "old-"+p) {
			t.Errorf("partition %s: epoch %q, epoch required %v", p, part.LogEpoch, part.EpochRequired)
		}
		if w, ok := want[p]; ok && part.LogEpoch != w {
			t.Errorf("partition %s: epoch %q; want %q", p, part.LogEpoch, w)
		}
	}
	return got
}

func wantClients(t *testing.T, st store.Store, want map[string]bool) {
	t.Helper()
	for p, present := range want {
		_, err := st.Client(context.Background(), p, "c-"+p)
		if present && err != nil {
			t.Errorf("partition %s: client record: %v; want it kept", p, err)
		}
		if !present && !errors.Is(err, store.ErrNotFound) {
			t.Errorf("partition %s: client record: %v; want it deleted", p, err)
		}
	}
}
