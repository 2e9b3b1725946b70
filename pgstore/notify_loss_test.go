package pgstore

import (
	"testing"
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
