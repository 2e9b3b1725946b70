package sqliteimage_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver, for reading images independently

	"github.com/syncgo/syncgo/internal/sqliteimage"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// allTypes has a column of every §2.4 type, each nullable but the key.
var allTypes = []wire.Column{
	{Name: "id", Type: wire.TypeString},
	{Name: "n", Type: wire.TypeInteger, Nullable: true},
	{Name: "f", Type: wire.TypeFloat, Nullable: true},
	{Name: "ok", Type: wire.TypeBoolean, Nullable: true},
	{Name: "doc", Type: wire.TypeJSON, Nullable: true},
	{Name: "raw", Type: wire.TypeBytes, Nullable: true},
	{Name: "att", Type: wire.TypeBlobRef, Nullable: true},
	{Name: "crdt", Type: wire.TypeCRDT, Nullable: true},
	{Name: "title", Type: wire.TypeString},
}

const blobRef = `{"blobId":"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","byteLength":12,"mediaType":"text/plain"}`

func str(s string) wire.Value    { return wire.Value{Str: s} }
func integer(n int64) wire.Value { return wire.Value{Int: n} }
func float(f float64) wire.Value { return wire.Value{Float: f} }
func boolean(b bool) wire.Value  { return wire.Value{Bool: b} }
func blob(b []byte) wire.Value   { return wire.Value{Bytes: b} }

var null = wire.Value{Null: true}

// allTypesRows are rows in primary-key order covering NULLs, empty and
// binary bytes, verbatim JSON text, unicode and extreme numbers.
func allTypesRows() []sqliteimage.Row {
	return []sqliteimage.Row{
		{ServerVersion: 1, Values: []wire.Value{str("a"), integer(0), float(0), boolean(false), str("{}"), blob([]byte{}), str(blobRef), blob([]byte{0}), str("")}},
		{ServerVersion: 7, Values: []wire.Value{str("b"), null, null, null, null, null, null, null, str("all null")}},
		{ServerVersion: 1 << 40, Values: []wire.Value{str("c"), integer(1<<53 - 1), float(-1.5e300), boolean(true),
			str(`{ "b" : 1,  "a":[1, 2.50, "x"] , "a":null }`), blob([]byte{0, 1, 2, 255, 0}), null, blob([]byte("yjs")), str("héllo wörld ✓ 🚀 \u0000 end")}},
		{ServerVersion: 2, Values: []wire.Value{str("d"), integer(-(1<<53 - 1)), float(math.Inf(-1)), boolean(true),
			str(`"just a string"`), null, null, null, str("日本語")}},
		{ServerVersion: 3, Values: []wire.Value{str("e"), integer(42), float(3), null, str(`[ ]`), blob(nil), null, null, str("float 3 is REAL")}},
		{ServerVersion: 4, Values: []wire.Value{str("é"), integer(-1), float(0.1), boolean(false), str(`1e3`), null, null, null, str("unicode key")}},
	}
}

// batches yields rows in batches of size n.
func batches(rows []sqliteimage.Row, n int) iter.Seq2[[]sqliteimage.Row, error] {
	return func(yield func([]sqliteimage.Row, error) bool) {
		for len(rows) > 0 {
			k := min(n, len(rows))
			if !yield(rows[:k], nil) {
				return
			}
			rows = rows[k:]
		}
	}
}

var testMeta = sqliteimage.Meta{Table: "things", SchemaVersion: 3, AsOfCommitSeq: 99, ScopeDigest: "sha256:feed"}

func build(t *testing.T, cols []wire.Column, pk int, rows []sqliteimage.Row) []byte {
	t.Helper()
	b, err := sqliteimage.Build(context.Background(), t.TempDir(), testMeta, cols, pk, batches(rows, 2))
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return b
}

func segmentID(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func TestBuildRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rows := allTypesRows()
	img := build(t, allTypes, 0, rows)

	meta, cols, count, err := sqliteimage.Inspect(ctx, img)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	if meta != testMeta || count != int64(len(rows)) {
		t.Errorf("Inspect = %+v, %d rows; want %+v, %d rows", meta, count, testMeta, len(rows))
	}
	wantCols := []sqliteimage.Column{
		{Name: "id", DeclType: "TEXT", NotNull: true, PrimaryKey: true},
		{Name: "n", DeclType: "INTEGER"},
		{Name: "f", DeclType: "REAL"},
		{Name: "ok", DeclType: "INTEGER"},
		{Name: "doc", DeclType: "TEXT"},
		{Name: "raw", DeclType: "BLOB"},
		{Name: "att", DeclType: "TEXT"},
		{Name: "crdt", DeclType: "BLOB"},
		{Name: "title", DeclType: "TEXT", NotNull: true},
	}
	if !reflect.DeepEqual(cols, wantCols) {
		t.Errorf("columns:\n got %+v\nwant %+v", cols, wantCols)
	}

	got, err := sqliteimage.ReadRows(ctx, img, allTypes, 0)
	if err != nil {
		t.Fatalf("ReadRows: %v", err)
	}
	want := allTypesRows()
	want[4].Values[5] = blob([]byte{}) // a non-null empty value stays an empty blob
	if len(got) != len(want) {
		t.Fatalf("ReadRows: %d rows, want %d", len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("row %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}

	err = sqliteimage.Verify(ctx, img, sqliteimage.Expect{SegmentID: segmentID(img), Table: testMeta.Table,
		SchemaVersion: testMeta.SchemaVersion, AsOfCommitSeq: testMeta.AsOfCommitSeq, ScopeDigest: testMeta.ScopeDigest,
		RowCount: int64(len(rows)), Columns: allTypes, PrimaryKey: 0})
	if err != nil {
		t.Errorf("Verify: %v", err)
	}
}

// TestCellEncodings reads the raw cells with SQL, as a client's ATTACH +
// INSERT … SELECT would see them.
func TestCellEncodings(t *testing.T) {
	t.Parallel()
	img := build(t, allTypes, 0, allTypesRows())
	withDB(t, img, func(db *sql.DB) {
		var (
			ok, version              int64
			doc, okType, fType, rawT string
		)
		q := `SELECT ok, typeof(ok), doc, typeof(f), typeof(raw), _syncular_version FROM things WHERE id = 'c'`
		if err := db.QueryRow(q).Scan(&ok, &okType, &doc, &fType, &rawT, &version); err != nil {
			t.Fatal(err)
		}
		if ok != 1 || okType != "integer" || fType != "real" || rawT != "blob" || version != 1<<40 {
			t.Errorf("row c: ok %d (%s), f %s, raw %s, version %d", ok, okType, fType, rawT, version)
		}
		if want := `{ "b" : 1,  "a":[1, 2.50, "x"] , "a":null }`; doc != want {
			t.Errorf("json cell = %q, want it verbatim %q", doc, want)
		}
		var nulls int
		q = `SELECT (n IS NULL) + (f IS NULL) + (ok IS NULL) + (doc IS NULL) + (raw IS NULL) + (att IS NULL) + (crdt IS NULL) FROM things WHERE id = 'b'`
		if err := db.QueryRow(q).Scan(&nulls); err != nil {
			t.Fatal(err)
		}
		if nulls != 7 {
			t.Errorf("row b has %d NULL cells, want 7", nulls)
		}
		var emptyType string
		var emptyLen int
		if err := db.QueryRow(`SELECT typeof(raw), length(raw) FROM things WHERE id = 'a'`).Scan(&emptyType, &emptyLen); err != nil {
			t.Fatal(err)
		}
		if emptyType != "blob" || emptyLen != 0 {
			t.Errorf("empty bytes = %s of length %d, want an empty blob", emptyType, emptyLen)
		}
		var tables []string
		rows, err := db.Query(`SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var s string
			_ = rows.Scan(&s)
			tables = append(tables, s)
		}
		rows.Close()
		if want := []string{"_syncular_segment", "things"}; !reflect.DeepEqual(tables, want) {
			t.Errorf("tables = %v, want %v", tables, want)
		}
		var format, sv, asOf, count int64
		var table, digest string
		if err := db.QueryRow(`SELECT format, "table", schemaVersion, asOfCommitSeq, scopeDigest, rowCount FROM _syncular_segment`).
			Scan(&format, &table, &sv, &asOf, &digest, &count); err != nil {
			t.Fatal(err)
		}
		if format != 1 || table != "things" || sv != 3 || asOf != 99 || digest != "sha256:feed" || count != 6 {
			t.Errorf("metadata = %d %q %d %d %q %d", format, table, sv, asOf, digest, count)
		}
		var ddl string
		if err := db.QueryRow(`SELECT sql FROM sqlite_master WHERE name = '_syncular_segment'`).Scan(&ddl); err != nil {
			t.Fatal(err)
		}
		want := `CREATE TABLE "_syncular_segment" ("format" INTEGER NOT NULL, "table" TEXT NOT NULL, "schemaVersion" INTEGER NOT NULL, "asOfCommitSeq" INTEGER NOT NULL, "scopeDigest" TEXT NOT NULL, "rowCount" INTEGER NOT NULL)`
		if ddl != want {
			t.Errorf("metadata DDL:\n got %s\nwant %s", ddl, want)
		}
	})
}

func TestIntegerPrimaryKeyAndEmptyImage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cols := []wire.Column{{Name: "label", Type: wire.TypeString, Nullable: true}, {Name: "k", Type: wire.TypeInteger}}
	for _, n := range []int{0, 1, 2500} {
		rows := make([]sqliteimage.Row, n)
		for i := range rows {
			rows[i] = sqliteimage.Row{ServerVersion: int64(i + 1), Values: []wire.Value{str(fmt.Sprint("row ", i)), integer(int64(i))}}
		}
		img, err := sqliteimage.Build(ctx, "", testMeta, cols, 1, batches(rows, 1000))
		if err != nil {
			t.Fatalf("%d rows: Build: %v", n, err)
		}
		_, got, count, err := sqliteimage.Inspect(ctx, img)
		if err != nil || count != int64(n) {
			t.Fatalf("%d rows: Inspect = %d, %v", n, count, err)
		}
		if !got[1].PrimaryKey || got[1].DeclType != "INTEGER" || !got[1].NotNull || got[0].NotNull {
			t.Errorf("%d rows: columns %+v", n, got)
		}
		back, err := sqliteimage.ReadRows(ctx, img, cols, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, rows) && !(n == 0 && len(back) == 0) {
			t.Errorf("%d rows: ReadRows differs", n)
		}
	}
}

// TestDataTableLayout: a data table of small rows keyed by a non-nullable
// column other than an INTEGER is stored WITHOUT ROWID (one b-tree, no key
// index); an INTEGER key stays the rowid, and a nullable key (which
// WITHOUT ROWID would refuse as NULL), rows averaging more than 200 bytes
// and an empty image keep the rowid table and its key index. Each image
// still reads back row for row.
func TestDataTableLayout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name         string
		key          wire.Column
		key1, key2   wire.Value
		label        string
		rows         int
		withoutRowID bool
	}{
		{"string key", wire.Column{Name: "k", Type: wire.TypeString}, str("a"), str("b"), "one", 2, true},
		{"string key, 180-byte labels", wire.Column{Name: "k", Type: wire.TypeString}, str("a"), str("b"), strings.Repeat("x", 180), 2, true},
		{"string key, 200-byte labels", wire.Column{Name: "k", Type: wire.TypeString}, str("a"), str("b"), strings.Repeat("x", 200), 2, false},
		{"string key, empty image", wire.Column{Name: "k", Type: wire.TypeString}, str("a"), str("b"), "one", 0, false},
		{"integer key", wire.Column{Name: "k", Type: wire.TypeInteger}, integer(1), integer(2), "one", 2, false},
		{"boolean key", wire.Column{Name: "k", Type: wire.TypeBoolean}, wire.Value{Bool: false}, wire.Value{Bool: true}, "one", 2, false},
		{"nullable string key", wire.Column{Name: "k", Type: wire.TypeString, Nullable: true}, str("a"), str("b"), "one", 2, false},
	} {
		cols := []wire.Column{{Name: "label", Type: wire.TypeString, Nullable: true}, tc.key}
		rows := []sqliteimage.Row{
			{ServerVersion: 1, Values: []wire.Value{str(tc.label), tc.key1}},
			{ServerVersion: 2, Values: []wire.Value{str(tc.label), tc.key2}},
		}[:tc.rows]
		img := build(t, cols, 1, rows)
		withDB(t, img, func(db *sql.DB) {
			var ddl string
			var indexes int
			if err := db.QueryRow(`SELECT sql FROM sqlite_master WHERE name = 'things'`).Scan(&ddl); err != nil {
				t.Fatal(err)
			}
			if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'index'`).Scan(&indexes); err != nil {
				t.Fatal(err)
			}
			if got := strings.HasSuffix(ddl, " WITHOUT ROWID"); got != tc.withoutRowID {
				t.Errorf("%s: DDL %s; WITHOUT ROWID %v, want %v", tc.name, ddl, got, tc.withoutRowID)
			}
			if wantIdx := map[bool]int{true: 0, false: 1}[tc.withoutRowID]; tc.key.Type == wire.TypeString && indexes != wantIdx {
				t.Errorf("%s: %d indexes, want %d", tc.name, indexes, wantIdx)
			}
		})
		back, err := sqliteimage.ReadRows(ctx, img, cols, 1)
		if err != nil {
			t.Fatalf("%s: ReadRows: %v", tc.name, err)
		}
		if !reflect.DeepEqual(back, rows) && !(len(rows) == 0 && len(back) == 0) {
			t.Errorf("%s: ReadRows = %+v, want %+v", tc.name, back, rows)
		}
	}
}

func TestBuildRemovesItsFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := sqliteimage.Build(context.Background(), dir, testMeta, allTypes, 0, batches(allTypesRows(), 3)); err != nil {
		t.Fatal(err)
	}
	bad := allTypesRows()
	bad[2].ServerVersion = 0
	if _, err := sqliteimage.Build(context.Background(), dir, testMeta, allTypes, 0, batches(bad, 3)); err == nil {
		t.Fatal("Build with a zero server version succeeded")
	}
	left, _ := os.ReadDir(dir)
	if len(left) != 0 {
		t.Errorf("Build left %d files in its directory", len(left))
	}
}

func TestBuildErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	boom := errors.New("scan failed")
	nan := allTypesRows()
	nan[0].Values[2] = float(math.NaN())
	negZero := allTypesRows()
	negZero[3].Values[2] = float(math.Copysign(0, -1))
	nullKey := allTypesRows()
	nullKey[0].Values[8] = null
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	tests := []struct {
		name  string
		ctx   context.Context
		meta  sqliteimage.Meta
		cols  []wire.Column
		pk    int
		rows  iter.Seq2[[]sqliteimage.Row, error]
		max   int64
		want  error
		match string
	}{
		{name: "batch error", rows: func(yield func([]sqliteimage.Row, error) bool) {
			if yield(allTypesRows()[:1], nil) {
				yield(nil, boom)
			}
		}, want: boom},
		{name: "NaN", rows: batches(nan, 10), want: sqliteimage.ErrUnrepresentable},
		{name: "negative zero", rows: batches(negZero, 10), want: sqliteimage.ErrUnrepresentable},
		{name: "too large by values", rows: batches(allTypesRows(), 1), max: 64, want: sqliteimage.ErrTooLarge},
		{name: "too large by file", rows: batches(allTypesRows(), 10), max: 4096, want: sqliteimage.ErrTooLarge},
		{name: "NULL in NOT NULL", rows: batches(nullKey, 10), match: "NOT NULL"},
		{name: "wrong value count", rows: batches([]sqliteimage.Row{{ServerVersion: 1, Values: []wire.Value{str("x")}}}, 1), match: "values for"},
		{name: "cancelled", ctx: cancelled, rows: batches(allTypesRows(), 10), want: context.Canceled},
		{name: "reserved table", meta: sqliteimage.Meta{Table: "_syncular_segment"}, match: "reserved"},
		{name: "sqlite_ table", meta: sqliteimage.Meta{Table: "SQLite_x"}, match: "reserved"},
		{name: "version column", cols: []wire.Column{{Name: "_Syncular_Version", Type: wire.TypeInteger}}, match: "reserved"},
		{name: "duplicate column", cols: []wire.Column{{Name: "a", Type: wire.TypeInteger}, {Name: "A", Type: wire.TypeString}}, match: "repeated"},
		{name: "unknown type", cols: []wire.Column{{Name: "a", Type: 42}}, match: "unknown type"},
		{name: "pk out of range", pk: 9, match: "out of range"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.ctx == nil {
				tc.ctx = ctx
			}
			if tc.meta.Table == "" {
				tc.meta = testMeta
			}
			if tc.cols == nil {
				tc.cols = allTypes
			}
			b := sqliteimage.Builder{Dir: t.TempDir(), MaxBytes: tc.max}
			_, err := b.Build(tc.ctx, tc.meta, tc.cols, tc.pk, tc.rows)
			switch {
			case err == nil:
				t.Fatal("Build succeeded")
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Errorf("Build = %v, want %v", err, tc.want)
			case tc.match != "" && !strings.Contains(err.Error(), tc.match):
				t.Errorf("Build = %v, want it to mention %q", err, tc.match)
			}
		})
	}
}

// withDB opens a copy of an image read-write.
func withDB(t testing.TB, img []byte, fn func(db *sql.DB)) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "image.sqlite")
	if err := os.WriteFile(path, img, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(DELETE)")
	if err != nil {
		t.Fatal(err)
	}
	fn(db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mutate(t testing.TB, img []byte, stmts ...string) []byte {
	t.Helper()
	return withDB(t, img, func(db *sql.DB) {
		for _, s := range stmts {
			if _, err := db.Exec(s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
	})
}

func TestInspectRejects(t *testing.T) {
	t.Parallel()
	good := build(t, allTypes, 0, allTypesRows())
	tests := []struct {
		name  string
		image []byte
	}{
		{"empty", nil},
		{"not sqlite", []byte("SSG2 this is not a database at all")},
		{"truncated header", good[:16]},
		{"corrupt", append(append([]byte{}, good[:100]...), make([]byte, 4000)...)},
		{"no metadata", mutate(t, good, `DROP TABLE _syncular_segment`)},
		{"two metadata rows", mutate(t, good, `INSERT INTO _syncular_segment SELECT * FROM _syncular_segment`)},
		{"no metadata row", mutate(t, good, `DELETE FROM _syncular_segment`)},
		{"format 2", mutate(t, good, `UPDATE _syncular_segment SET format = 2`)},
		{"a third table", mutate(t, good, `CREATE TABLE extra (x)`)},
		{"metadata names another table", mutate(t, good, `UPDATE _syncular_segment SET "table" = 'other'`)},
		{"row count mismatch", mutate(t, good, `DELETE FROM things WHERE id = 'a'`)},
		{"extra metadata column", mutate(t, good, `ALTER TABLE _syncular_segment ADD COLUMN isLastPage INTEGER`)},
		{"no version column", mutate(t, good, `ALTER TABLE things DROP COLUMN _syncular_version`)},
		{"version column not last", mutate(t, good, `ALTER TABLE things ADD COLUMN late TEXT`)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, _, _, err := sqliteimage.Inspect(context.Background(), tc.image)
			if !errors.Is(err, sqliteimage.ErrInvalid) {
				t.Errorf("Inspect = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestVerifyCodes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	img := build(t, allTypes, 0, allTypesRows())
	expect := func() sqliteimage.Expect {
		return sqliteimage.Expect{SegmentID: segmentID(img), Table: "things", SchemaVersion: 3, AsOfCommitSeq: 99,
			ScopeDigest: "sha256:feed", RowCount: 6, Columns: allTypes, PrimaryKey: 0}
	}
	reordered := append([]wire.Column{}, allTypes...)
	reordered[1], reordered[2] = reordered[2], reordered[1]
	notNull := append([]wire.Column{}, allTypes...)
	notNull[1].Nullable = false
	tests := []struct {
		name string
		edit func(*sqliteimage.Expect)
		code string
	}{
		{"matches", func(*sqliteimage.Expect) {}, ""},
		{"hash", func(e *sqliteimage.Expect) { e.SegmentID = segmentID([]byte("other")) }, syncerr.CodeInvalidRequest},
		{"table", func(e *sqliteimage.Expect) { e.Table = "others" }, syncerr.CodeInvalidRequest},
		{"schema version", func(e *sqliteimage.Expect) { e.SchemaVersion = 4 }, syncerr.CodeInvalidRequest},
		{"pin", func(e *sqliteimage.Expect) { e.AsOfCommitSeq = 100 }, syncerr.CodeInvalidRequest},
		{"digest", func(e *sqliteimage.Expect) { e.ScopeDigest = "sha256:beef" }, syncerr.CodeInvalidRequest},
		{"row count", func(e *sqliteimage.Expect) { e.RowCount = 5 }, syncerr.CodeInvalidRequest},
		{"column order", func(e *sqliteimage.Expect) { e.Columns = reordered }, syncerr.CodeSchemaMismatch},
		{"missing column", func(e *sqliteimage.Expect) { e.Columns = allTypes[:8] }, syncerr.CodeSchemaMismatch},
		{"nullability", func(e *sqliteimage.Expect) { e.Columns = notNull }, syncerr.CodeSchemaMismatch},
		{"primary key", func(e *sqliteimage.Expect) { e.PrimaryKey = 8 }, syncerr.CodeSchemaMismatch},
	}
	for _, tc := range tests {
		e := expect()
		tc.edit(&e)
		err := sqliteimage.Verify(ctx, img, e)
		var code string
		if pe := syncerr.As(err); pe != nil {
			code = pe.Code
		} else if err != nil {
			code = "untyped: " + err.Error()
		}
		if code != tc.code {
			t.Errorf("%s: Verify code %q, want %q", tc.name, code, tc.code)
		}
	}
	garbage := []byte("not a database")
	e := expect()
	e.SegmentID = segmentID(garbage)
	if pe := syncerr.As(sqliteimage.Verify(ctx, garbage, e)); pe == nil || pe.Code != syncerr.CodeInvalidRequest {
		t.Errorf("Verify(garbage) = %v, want sync.invalid_request", pe)
	}
}
