package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo/store"
)

// NOTIFY channels are database-wide: the listeners of concurrent tests hear
// each other's commits unless the schema filter drops them. Every test
// still uses partition names of its own and ignores the others.

// listenWait bounds the wait for one notification.
const listenWait = 15 * time.Second

// listener records what a ListenCommits call delivers.
type listener struct {
	ch   chan store.CommitNotification
	done chan error
}

// startListener runs s.ListenCommits until cleanup and returns once its
// LISTEN is in effect (its first Reconnected notification).
func startListener(t *testing.T, s *Store) *listener {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &listener{ch: make(chan store.CommitNotification, 1024), done: make(chan error, 1)}
	go func() {
		l.done <- s.ListenCommits(ctx, func(n store.CommitNotification) {
			select {
			case l.ch <- n:
			case <-ctx.Done():
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-l.done:
		case <-time.After(listenWait):
			t.Error("ListenCommits did not return after its context ended")
		}
	})
	if n := l.next(t, "\x00none"); !n.Reconnected {
		t.Fatalf("first notification = %+v; want Reconnected", n)
	}
	return l
}

// next returns the next notification that is a Reconnected one or names a
// partition starting with prefix.
func (l *listener) next(t *testing.T, prefix string) store.CommitNotification {
	t.Helper()
	timer := time.NewTimer(listenWait)
	defer timer.Stop()
	for {
		select {
		case n := <-l.ch:
			if n.Reconnected || strings.HasPrefix(n.Partition, prefix) {
				return n
			}
		case err := <-l.done:
			t.Fatalf("ListenCommits returned %v", err)
		case <-timer.C:
			t.Fatalf("no notification for %q within %v", prefix, listenWait)
		}
	}
}

// want checks that the next notification announces partition's seq.
func (l *listener) want(t *testing.T, prefix, partition string, seq int64) {
	t.Helper()
	want := store.CommitNotification{Partition: partition, Seq: seq}
	if n := l.next(t, prefix); n != want {
		t.Fatalf("notification = %+v; want %+v", short(n), short(want))
	}
}

// short abbreviates a long partition id for messages.
func short(n store.CommitNotification) store.CommitNotification {
	if len(n.Partition) > 40 {
		n.Partition = n.Partition[:20] + "…" + n.Partition[len(n.Partition)-20:]
	}
	return n
}

// uniq returns a name unique to this run.
func uniq(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// applyTask appends one task commit to partition.
func applyTask(t *testing.T, s *Store, partition, id string) int64 {
	t.Helper()
	c := testSchema(t, 1)
	return apply(t, s, partition, task{id: id, project: "p1", owner: "o"}.write(t, c, 1))
}

func TestParseNotification(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		payload string
		want    store.CommitNotification
		ok      bool
	}{
		{"12:s:p", store.CommitNotification{Partition: "p", Seq: 12}, true},
		{"12:s:a:b:", store.CommitNotification{Partition: "a:b:", Seq: 12}, true},
		{"7:s:", store.CommitNotification{Partition: "", Seq: 7}, true},
		{"7:s:é\n\t ", store.CommitNotification{Partition: "é\n\t ", Seq: 7}, true},
		{"12:s", store.CommitNotification{Reconnected: true}, true},
		{"12:s2:p", store.CommitNotification{}, false},
		{"12:t:p", store.CommitNotification{}, false},
		{"x:s:p", store.CommitNotification{}, false},
		{"0:s:p", store.CommitNotification{}, false},
		{"-1:s:p", store.CommitNotification{}, false},
		{"s:p", store.CommitNotification{}, false},
		{"12", store.CommitNotification{}, false},
		{"", store.CommitNotification{}, false},
		{"grants:s:2:p1alice", store.CommitNotification{Grants: true, Partition: "p1", ActorID: "alice"}, true},
		{"grants:s:3:a:bc:d", store.CommitNotification{Grants: true, Partition: "a:b", ActorID: "c:d"}, true},
		{"grants:s:2:p1", store.CommitNotification{Grants: true, Partition: "p1"}, true},
		{"grants:s", store.CommitNotification{Grants: true}, true},
		{"grants:s2:2:p1a", store.CommitNotification{}, false},
		{"grants:t:2:p1a", store.CommitNotification{}, false},
		{"grants:s:9:p1", store.CommitNotification{}, false},
		{"grants:s:x:p1", store.CommitNotification{}, false},
	} {
		got, ok := parseNotification(tc.payload, "s")
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseNotification(%q) = %+v, %v; want %+v, %v", tc.payload, got, ok, tc.want, tc.ok)
		}
	}
}

// TestListenCommitsAcrossStores: a commit appended through one store
// reaches the listener of another store (its own pool, no URL: the listen
// connection takes the pool's settings) on the same schema, with any
// partition id; commits of another schema with the same partition id do
// not.
func TestListenCommitsAcrossStores(t *testing.T) {
	t.Parallel()
	sch := newSchema(t)
	s1 := openIn(t, sch, Config{})
	ensure(t, s1, testSchema(t, 1))
	s2 := openIn(t, sch, Config{})
	other := openStore(t)
	ensure(t, other, testSchema(t, 1))
	l := startListener(t, s2)

	prefix := uniq("across-")
	part := prefix + ":a:b/é \t\"'%;"
	l.want(t, prefix, part, applyTask(t, s1, part, "t1"))
	if seq := applyTask(t, other, part, "t1"); seq != 1 {
		t.Fatalf("other schema's seq = %d", seq)
	}
	if seq := applyTask(t, s1, part, "t2"); seq != 2 {
		t.Fatalf("seq = %d", seq)
	}
	// The other schema's commit came first: a listener that kept it would
	// see {part, 1} here.
	l.want(t, prefix, part, 2)

	// Close stops the listener.
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-l.done:
		if err != nil {
			t.Fatalf("ListenCommits after Close = %v", err)
		}
		l.done <- nil // for the cleanup
	case <-time.After(listenWait):
		t.Fatal("ListenCommits did not return after Close")
	}
	if err := s2.ListenCommits(context.Background(), func(store.CommitNotification) {}); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("ListenCommits on a closed store = %v", err)
	}
}

// TestListenCommitsRolledBack: an append whose transaction or savepoint
// rolls back announces nothing.
func TestListenCommitsRolledBack(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	c := testSchema(t, 1)
	ensure(t, s, c)
	l := startListener(t, s)
	prefix := uniq("rollback-")
	aborted, kept, marker := prefix+"-aborted", prefix+"-kept", prefix+"-marker"
	errAbort := errors.New("abort")

	// A rolled-back transaction.
	err := s.Write(context.Background(), aborted, func(ctx context.Context, tx store.WriteTx) error {
		if _, err := tx.AppendCommit(ctx, commitOf("x", upsertChange(task{id: "t1", project: "p", owner: "o"}.write(t, c, 1)))); err != nil {
			return err
		}
		return errAbort
	})
	if !errors.Is(err, errAbort) {
		t.Fatalf("Write = %v", err)
	}
	// A commit whose second append is rolled back to its savepoint.
	err = s.Write(context.Background(), kept, func(ctx context.Context, tx store.WriteTx) error {
		if _, err := tx.AppendCommit(ctx, commitOf("k1", upsertChange(task{id: "t1", project: "p", owner: "o"}.write(t, c, 1)))); err != nil {
			return err
		}
		err := tx.Candidate(ctx, func(ctx context.Context) error {
			seq, err := tx.AppendCommit(ctx, commitOf("k2", upsertChange(task{id: "t2", project: "p", owner: "o"}.write(t, c, 1))))
			if err != nil {
				return err
			}
			if seq != 2 {
				t.Errorf("savepoint append seq = %d", seq)
			}
			return errAbort
		})
		if !errors.Is(err, errAbort) {
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	applyTask(t, s, marker, "t1")
	// Notifications arrive in commit order: anything the rollbacks sent
	// would come before the marker's.
	l.want(t, prefix, kept, 1)
	l.want(t, prefix, marker, 1)
	l.want(t, prefix, kept, applyTask(t, s, kept, "t3"))
}

// TestListenCommitsLongPartition: a payload that would reach 8000 bytes
// is replaced by a catch-up notification; one byte less still names the
// partition.
func TestListenCommitsLongPartition(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ensure(t, s, testSchema(t, 1))
	l := startListener(t, s)
	prefix := uniq("long-")
	// "1:<schema>:<partition>" of 7999 bytes, then of 8000.
	fits := prefix + strings.Repeat("x", 7999-len("1::")-len(s.dbSchema)-len(prefix))
	long := fits + "y"
	l.want(t, prefix, fits, applyTask(t, s, fits, "t1"))
	applyTask(t, s, long, "t1")
	if n := l.next(t, prefix); !n.Reconnected {
		t.Fatalf("notification = %+v; want Reconnected", short(n))
	}
	l.want(t, prefix, prefix, applyTask(t, s, prefix, "t1"))
}

// TestListenCommitsReconnects: when the listen connection's backend is
// terminated, the listener reconnects, reports Reconnected and hears the
// commits after that.
func TestListenCommitsReconnects(t *testing.T) {
	t.Parallel()
	base := testURL(t)
	app := uniq("syncgo_test_listen_")
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	s := openIn(t, newSchema(t), Config{ListenURL: u.String()})
	ensure(t, s, testSchema(t, 1))
	l := startListener(t, s)
	prefix := uniq("reconnect-")
	l.want(t, prefix, prefix, applyTask(t, s, prefix, "t1"))

	for round := range 2 {
		if n := terminateBackends(t, base, app); n < 1 {
			t.Fatalf("round %d: terminated %d backends named %s; want at least 1", round, n, app)
		}
		// A commit during the outage is announced or covered by the
		// Reconnected that follows.
		gap := applyTask(t, s, prefix, "t1")
		for {
			n := l.next(t, prefix)
			if n.Reconnected {
				break
			}
			if n.Partition != prefix || n.Seq != gap {
				t.Fatalf("round %d: notification = %+v before Reconnected", round, n)
			}
		}
		after := applyTask(t, s, prefix, "t1")
		for {
			n := l.next(t, prefix)
			if n.Reconnected || n.Partition != prefix {
				t.Fatalf("round %d: notification = %+v; want seq %d", round, n, after)
			}
			if n.Seq == after {
				break
			}
			if n.Seq != gap {
				t.Fatalf("round %d: notification = %+v; want seq %d or %d", round, n, gap, after)
			}
		}
	}
}

// TestListenCommitsIdleProbe: a connection silent for the probe interval
// is pinged and kept: the listener does not reconnect.
func TestListenCommitsIdleProbe(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ensure(t, s, testSchema(t, 1))
	s.listenProbe = 20 * time.Millisecond
	l := startListener(t, s)
	prefix := uniq("probe-")
	for i := range 5 {
		// Idle time, not synchronization: a few probe intervals pass.
		time.Sleep(3 * s.listenProbe)
		l.want(t, prefix, prefix, applyTask(t, s, prefix, fmt.Sprintf("t%d", i)))
	}
}

// terminateBackends terminates the backends with the application name and
// returns how many there were.
func terminateBackends(t *testing.T, base, app string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	var n int64
	err = conn.QueryRow(ctx, `SELECT count(*) FROM (
  SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1) x`, app).Scan(&n)
	if err != nil {
		t.Fatalf("terminate: %v", err)
	}
	return n
}
