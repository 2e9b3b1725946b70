package sqlitestore

import (
	"context"
	"reflect"
	"testing"

	"github.com/syncgo/syncgo/store"
)

// TestRemoteQuery: SQLite values come back as the plain values of
// store.RemoteResult, and the read connection refuses a write.
func TestRemoteQuery(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, Config{Path: MemoryPath})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.RemoteTarget(); got.Dialect != store.DialectSQLite || got.Schema != "main" {
		t.Fatalf("target %+v", got)
	}
	res, err := s.RemoteQuery(ctx, "p", store.RemoteStatement{SQL: "SELECT ?1 AS p, 2 AS i, 0.5 AS f, x'0102' AS b, NULL AS z", Args: []any{"p"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []any{"p", int64(2), 0.5, []byte{1, 2}, nil}
	if len(res.Rows) != 1 || !reflect.DeepEqual(res.Rows[0], want) || !reflect.DeepEqual(res.Columns, []string{"p", "i", "f", "b", "z"}) {
		t.Fatalf("result %#v %v", res.Rows, res.Columns)
	}
	if _, err := s.RemoteQuery(ctx, "p", store.RemoteStatement{SQL: "CREATE TABLE remote_write_probe(x)"}); err == nil {
		t.Fatal("a remote query wrote")
	}
	// Without the commit sequence: the same rows, still read-only.
	res, err = s.RemoteQuery(ctx, "p", store.RemoteStatement{SQL: "SELECT 7 AS v", NoCommitSeq: true})
	if err != nil || len(res.Rows) != 1 || res.Rows[0][0] != int64(7) || res.MaxCommitSeq != 0 {
		t.Fatalf("NoCommitSeq: %#v %v", res, err)
	}
	if _, err := s.RemoteQuery(ctx, "p", store.RemoteStatement{SQL: "CREATE TABLE remote_write_probe(x)", NoCommitSeq: true}); err == nil {
		t.Fatal("a remote query without the commit sequence wrote")
	}
}
