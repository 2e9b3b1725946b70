package pgstore

import (
	"context"
	"crypto/rand"
	"strconv"
	"strings"
	"testing"
	"time"

	"log/slog"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo/store"
)

// TestCommitNotificationFailureRetried: a commit's notification is its
// own statement after the COMMIT, on the writer's connection. When that
// statement fails (the connection is lost right after the COMMIT, as
// pg_terminate_backend or a pooler restart does to a writer while the
// listeners' direct connections stay up), the commit is durable but no
// other instance hears of it: their sockets miss the delta until the
// partition's next commit. The store announces it again on another
// connection.
//
// The failure is injected by a pg_notify of the test's schema, ahead of
// pg_catalog in the writer's search_path, that fails once for the test's
// partition.
func TestCommitNotificationFailureRetried(t *testing.T) {
	t.Parallel()
	name := newSchema(t)
	base := testURL(t)
	admin(t, base, "CREATE SEQUENCE "+name+".notify_failures")
	admin(t, base, `CREATE FUNCTION `+name+`.pg_notify(channel text, payload text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF payload LIKE '%:lose-%' AND nextval('`+name+`.notify_failures') = 1 THEN
    RAISE EXCEPTION 'injected: the connection was lost after the COMMIT';
  END IF;
  PERFORM pg_catalog.pg_notify(channel, payload);
END $$`)
	writer := openIn(t, name+", pg_catalog", Config{})
	reader := openIn(t, name, Config{})
	ensure(t, writer, testSchema(t, 1))
	l := startListener(t, reader)
	prefix := uniq("lose-")
	seq := applyTask(t, writer, prefix, "t1")
	l.want(t, prefix, prefix, seq)
}

// TestCommitNotificationRetriedInBackground: the notification after a
// commit's COMMIT fails, and the one sent again waits (on an advisory lock
// the test holds, taken by the test schema's pg_notify). The Write answers
// while the notification sent again still waits: the commit stands, and
// its push's response does not wait for the announcement. Once the lock
// is released, the announcement goes out.
func TestCommitNotificationRetriedInBackground(t *testing.T) {
	t.Parallel()
	name := newSchema(t)
	base := testURL(t)
	var kb [3]byte
	_, _ = rand.Read(kb[:])
	key := int64(kb[0])<<16 | int64(kb[1])<<8 | int64(kb[2]) | 1<<24
	admin(t, base, "CREATE SEQUENCE "+name+".notify_failures")
	admin(t, base, `CREATE FUNCTION `+name+`.pg_notify(channel text, payload text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF payload LIKE '%:slow-%' THEN
    IF nextval('`+name+`.notify_failures') = 1 THEN
      RAISE EXCEPTION 'injected: the connection was lost after the COMMIT';
    END IF;
    PERFORM pg_advisory_xact_lock_shared(`+strconv.FormatInt(key, 10)+`);
  END IF;
  PERFORM pg_catalog.pg_notify(channel, payload);
END $$`)
	logs := &syncLog{}
	writer := openIn(t, name+", pg_catalog", Config{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	writer.renotifyTimeout = 5 * time.Minute // the test's lock decides
	reader := openIn(t, name, Config{})
	ensure(t, writer, testSchema(t, 1))
	l := startListener(t, reader)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	hold, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close(context.Background())
	if _, err := hold.Exec(ctx, `SELECT pg_advisory_lock($1)`, key); err != nil {
		t.Fatal(err)
	}
	// waiting reports whether a session waits for the lock.
	waiting := func() bool {
		var n int
		err := hold.QueryRow(ctx, `SELECT count(*) FROM pg_locks
WHERE locktype = 'advisory' AND NOT granted AND ((classid::bigint << 32) | objid::bigint) = $1`, key).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	prefix := uniq("slow-")
	var seq int64
	var werr error
	wrote := make(chan struct{})
	c := testSchema(t, 1)
	w := task{id: "t1", project: "p1", owner: "o"}.write(t, c, 1)
	go func() {
		defer close(wrote)
		werr = writer.Write(ctx, prefix, func(ctx context.Context, tx store.WriteTx) error {
			if err := tx.UpsertRow(ctx, w); err != nil {
				return err
			}
			var err error
			seq, err = tx.AppendCommit(ctx, commitOf("slow", upsertChange(w)))
			return err
		})
	}()
	for !waiting() {
		select {
		case <-ctx.Done():
			t.Fatal("the notification was not sent again")
		case <-time.After(10 * time.Millisecond):
		}
	}
	select {
	case <-wrote:
		if werr != nil {
			t.Fatalf("Write: %v", werr)
		}
		// A Write that waited for the notification sent again answers
		// only once that gave up.
		if strings.Contains(logs.String(), "commit notification lost") {
			t.Fatalf("the Write answered only after the notification was given up; log:\n%s", logs)
		}
	case <-ctx.Done():
		t.Fatal("the Write did not answer while its notification was being sent again")
	}
	if !waiting() {
		t.Fatal("the notification sent again stopped waiting before the lock was released (the Write waited for it)")
	}
	select {
	case n := <-l.ch:
		if strings.HasPrefix(n.Partition, prefix) {
			t.Fatalf("notification %+v before the lock was released", short(n))
		}
	default:
	}
	if _, err := hold.Exec(ctx, `SELECT pg_advisory_unlock($1)`, key); err != nil {
		t.Fatal(err)
	}
	l.want(t, prefix, prefix, seq)
}

// syncLog is a log destination safe for concurrent use.
type syncLog struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
