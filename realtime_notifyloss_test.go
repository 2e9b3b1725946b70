package syncgo_test

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/syncgo/syncgo/internal/binarytest"
	"github.com/syncgo/syncgo/internal/pgtest"
)

// TestRealtimeAcrossProcessesNotificationLost: two `syncgo serve`
// processes on one Postgres schema; the notification that follows a
// commit's COMMIT on the first fails (its writer connection lost right
// after the COMMIT, as pg_terminate_backend or a pooler's restart does,
// while the listen connections stay up). The commit is durable and must
// still reach a socket of the second process as a delta, not wait for the
// partition's next commit.
//
// The failure is injected by a pg_notify of the test's schema, ahead of
// pg_catalog in the first process's search_path, that fails the first
// commit notification of the partition.
func TestRealtimeAcrossProcessesNotificationLost(t *testing.T) {
	first, second := notifyFailingFleet(t, "nextval('SEQ') = 1")
	sc := mpDemoSchema(t)
	epoch, sock := mpSubscribedSocket(t, second.URL, "c2")
	seq := mpPushTask(t, sc, first.URL, epoch, "c1", "task-1", "one")
	sock.wantTask(t, seq, "task-1", "one", false)
	if !strings.Contains(first.Stderr.String(), "commit notification failed") {
		t.Errorf("the first process did not log the injected failure; stderr:\n%s", first.Stderr)
	}
}

// TestRealtimeAcrossProcessesNotificationNeverSent: the first process's
// notifications of the partition all fail, the one after the COMMIT and
// the ones sent again, as when the process dies between its COMMIT and
// its notification. The partition then stays quiet. The second process's
// socket still gets the commit's delta: its quiet sweep (every 5 s) reads
// the partition's newest commit. Before the sweep, nothing announced the
// commit until the partition's next one.
func TestRealtimeAcrossProcessesNotificationNeverSent(t *testing.T) {
	first, second := notifyFailingFleet(t, "TRUE")
	sc := mpDemoSchema(t)
	epoch, sock := mpSubscribedSocket(t, second.URL, "c2")
	seq := mpPushTask(t, sc, first.URL, epoch, "c1", "task-1", "one")
	sock.wantTaskWithin(t, seq, "task-1", "one", false, 25*time.Second)
	// The first process announces the commit again in the background
	// (within renotifyTimeout, 3 s) and then gives up; the sweep may have
	// delivered the delta before that, so the give-up is waited for.
	for deadline := time.Now().Add(15 * time.Second); !strings.Contains(first.Stderr.String(), "commit notification lost"); {
		if time.Now().After(deadline) {
			t.Fatalf("the first process did not give up on the notification; stderr:\n%s", first.Stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// notifyFailingFleet starts two `syncgo serve` processes on one Postgres
// schema; the first's pg_notify calls whose payload ends with ":default"
// (the test partition's) and for which failWhen (a SQL condition) holds
// raise an error. The failure comes from a pg_notify of the test's schema,
// ahead of pg_catalog in the first process's search_path.
func notifyFailingFleet(t *testing.T, failWhen string) (first, second *binarytest.Process) {
	t.Helper()
	base := pgtest.URL(t)
	if testing.Short() {
		t.Skip("builds and runs the syncgo binary")
	}
	t.Parallel()
	bin := binarytest.Build(t)
	db := pgtest.Schema(t, "syncgo_mp", false)
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	name := q.Get("search_path")
	pgtest.Exec(t, base, "CREATE SEQUENCE "+name+".notify_failures")
	pgtest.Exec(t, base, `CREATE FUNCTION `+name+`.pg_notify(channel text, payload text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF payload LIKE '%:default' AND `+strings.ReplaceAll(failWhen, "SEQ", name+".notify_failures")+` THEN
    RAISE EXCEPTION 'injected: the notification after the COMMIT failed';
  END IF;
  PERFORM pg_catalog.pg_notify(channel, payload);
END $$`)
	q.Set("search_path", name+",pg_catalog")
	u.RawQuery = q.Encode()
	return mpServe(t, bin, u.String(), "first"), mpServe(t, bin, db, "second")
}
