package pgstore

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/syncgo/syncgo/store"
)

// TestRemoteQueryValues: what Postgres returns is converted to the plain
// values of store.RemoteResult, a write is refused (read-only
// transaction), and an unknown partition reads maxCommitSeq 0.
func TestRemoteQueryValues(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	if got := s.RemoteTarget(); got.Dialect != store.DialectPostgres || got.Schema != s.dbSchema {
		t.Fatalf("target %+v", got)
	}
	res, err := s.RemoteQuery(ctx, "nobody", store.RemoteStatement{SQL: `SELECT $1::text AS p, 2::int2 AS a, 3::int4 AS b,
		1.25::numeric(6,2) AS n, 0.5::float4 AS f, '{"k":[1]}'::jsonb AS j, TIMESTAMPTZ '2024-01-02 03:04:05Z' AS ts,
		'6ba7b810-9dad-11d1-80b4-00c04fd430c8'::uuid AS u, NULL::text AS z, true AS t, '\x0102'::bytea AS y`, Args: []any{"nobody"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []any{"nobody", int64(2), int64(3), 1.25, 0.5, `{"k":[1]}`, "2024-01-02T03:04:05Z",
		"6ba7b810-9dad-11d1-80b4-00c04fd430c8", nil, true, []byte{1, 2}}
	if len(res.Rows) != 1 || !reflect.DeepEqual(res.Rows[0], want) || res.MaxCommitSeq != 0 {
		t.Fatalf("rows %#v (max %d), want %#v", res.Rows, res.MaxCommitSeq, want)
	}
	if !reflect.DeepEqual(res.Columns, []string{"p", "a", "b", "n", "f", "j", "ts", "u", "z", "t", "y"}) {
		t.Fatalf("columns %v", res.Columns)
	}
	if _, err := s.RemoteQuery(ctx, "p", store.RemoteStatement{SQL: "CREATE TABLE remote_write_probe(x int)"}); err == nil {
		t.Fatal("a remote query wrote")
	}
	// A failed statement leaves nothing behind: every connection of the
	// pool serves the next query (the aborted transaction was rolled back).
	for range 2 * int(s.pool.Config().MaxConns) {
		if _, err := s.RemoteQuery(ctx, "p", store.RemoteStatement{SQL: "SELECT 1/0"}); err == nil {
			t.Fatal("a division by zero succeeded")
		}
	}
	res, err = s.RemoteQuery(ctx, "p", store.RemoteStatement{SQL: "SELECT 7 AS v"})
	if err != nil || len(res.Rows) != 1 || res.Rows[0][0] != int64(7) {
		t.Fatalf("after failed queries: %v %v", res.Rows, err)
	}
	// Without the commit sequence: the same rows, still read-only.
	res, err = s.RemoteQuery(ctx, "p", store.RemoteStatement{SQL: "SELECT 7 AS v", NoCommitSeq: true})
	if err != nil || len(res.Rows) != 1 || res.Rows[0][0] != int64(7) || res.MaxCommitSeq != 0 {
		t.Fatalf("NoCommitSeq: %#v %v", res, err)
	}
	if _, err := s.RemoteQuery(ctx, "p", store.RemoteStatement{SQL: "CREATE TABLE remote_write_probe(x int)", NoCommitSeq: true}); err == nil {
		t.Fatal("a remote query without the commit sequence wrote")
	}
	// A JSON document is its text, whatever its top-level value: not the
	// Go value it decodes to (a bare string, NULL, a float64).
	res, err = s.RemoteQuery(ctx, "p", store.RemoteStatement{SQL: `SELECT '"42"'::jsonb, '"x"'::jsonb, 'null'::jsonb,
		'12345678901234567890'::jsonb, '[1e400, 2.50]'::jsonb, '{"b" : "a b",  "a":1}'::jsonb, ' "x" '::json, NULL::jsonb`})
	want = []any{`"42"`, `"x"`, `null`, `12345678901234567890`, `[` + "1" + strings.Repeat("0", 400) + `,2.50]`, `{"a":1,"b":"a b"}`, ` "x" `, nil}
	if err != nil || len(res.Rows) != 1 || !reflect.DeepEqual(res.Rows[0], want) {
		t.Fatalf("JSON documents: %#v %v; want %#v", res.Rows, err, want)
	}
	if st := s.pool.Stat(); st.AcquiredConns() != 0 {
		t.Fatalf("%d connections still acquired", st.AcquiredConns())
	}
}
