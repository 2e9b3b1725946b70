package syncgo_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/jsonb"
	"github.com/syncgo/syncgo/internal/remotewire"
	"github.com/syncgo/syncgo/internal/sqliteimage"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/wire"
)

// Value fidelity: every edge value a client can push comes back the same
// through every path a client reads it, on both drivers, or is refused at
// push with sync.invalid_request and nothing written. Values are pushed at
// wire versions 1 to 3, also as row ids. The paths: the bootstrap (rows
// segments inline and by reference), the incremental pull (COMMIT frames)
// and realtime deltas, each at wire versions 1 to 3, the SQLite image lane
// (§5.3) and a remote query (REMOTE.md) over the typed projection.

// fidelitySchema has one nullable column of each plain type.
func fidelitySchema(t *testing.T) *schema.Compiled {
	t.Helper()
	c, err := schema.New(1).
		Table("vals", "id", schema.String("id"), schema.String("project_id"),
			schema.String("s").Null(), schema.Integer("i").Null(), schema.Float("f").Null(),
			schema.Boolean("b").Null(), schema.JSON("j").Null(), schema.Bytes("raw").Null()).
		Scope("project:{project_id}").
		Compile()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fidelityCase is one value of one column.
type fidelityCase struct {
	name, col string
	v         wire.Value
}

func fidelityAccepted() []fidelityCase {
	negZero := math.Copysign(0, -1)
	deep := strings.Repeat("[", 200) + strings.Repeat("]", 200)
	long := strings.Repeat("abcdefgh✓😀", 6000) // 90,000 bytes
	bin := make([]byte, 65536)
	for i := range bin {
		bin[i] = byte(i * 7)
	}
	return []fidelityCase{
		{"s-empty", "s", wire.Value{Str: ""}},
		{"s-astral", "s", wire.Value{Str: "😀𝄞 astral"}},
		{"s-separators", "s", wire.Value{Str: "a\u2028b\u2029c"}},
		{"s-nonchars", "s", wire.Value{Str: "\uFFFF\uFFFE\uFEFF\U0010FFFF"}},
		{"s-controls", "s", wire.Value{Str: "\x01\t\r\n\x7f"}},
		{"s-long", "s", wire.Value{Str: long}},
		{"i-zero", "i", wire.Value{Int: 0}},
		{"i-max-safe", "i", wire.Value{Int: wire.MaxSafeInteger}},
		{"i-min-safe", "i", wire.Value{Int: -wire.MaxSafeInteger}},
		{"f-neg-zero", "f", wire.Value{Float: negZero}},
		{"f-subnormal", "f", wire.Value{Float: math.SmallestNonzeroFloat64}},
		{"f-min-normal", "f", wire.Value{Float: 2.2250738585072014e-308}},
		{"f-max", "f", wire.Value{Float: math.MaxFloat64}},
		{"f-min", "f", wire.Value{Float: -math.MaxFloat64}},
		{"f-tenth", "f", wire.Value{Float: 0.1}},
		{"f-1e21", "f", wire.Value{Float: 1e21}},
		{"f-above-2p53", "f", wire.Value{Float: 9007199254740993}},
		{"f-inf", "f", wire.Value{Float: math.Inf(1)}},
		{"f-neg-inf", "f", wire.Value{Float: math.Inf(-1)}},
		{"f-nan", "f", wire.Value{Float: math.Float64frombits(0x7ff8000000000001)}},
		{"b-true", "b", wire.Value{Bool: true}},
		{"b-false", "b", wire.Value{Bool: false}},
		{"j-string", "j", wire.Value{Str: `"x"`}},
		{"j-numeric-string", "j", wire.Value{Str: `"42"`}},
		{"j-null", "j", wire.Value{Str: `null`}},
		{"j-true", "j", wire.Value{Str: `true`}},
		{"j-big-int", "j", wire.Value{Str: `12345678901234567890`}},
		{"j-precise", "j", wire.Value{Str: `0.1000000000000000055511151231257827`}},
		{"j-beyond-float64", "j", wire.Value{Str: `[1e400,-0,1.0]`}},
		{"j-lone-surrogate", "j", wire.Value{Str: `"\ud800"`}},
		{"j-zero-huge-exponent", "j", wire.Value{Str: `[0e99999999999999999999]`}},
		{"j-key-order", "j", wire.Value{Str: `{"b":1,"a":[1,2.50,"x"]}`}},
		{"j-dup-keys", "j", wire.Value{Str: `{"a":1,"a":2}`}},
		{"j-space", "j", wire.Value{Str: " [ 1 , {\"k\" : \"v\"} ]\n"}},
		{"j-html", "j", wire.Value{Str: `"<a&b>"`}},
		{"j-escapes", "j", wire.Value{Str: `"\u2028\ud83d\ude00\/"`}},
		{"j-deep", "j", wire.Value{Str: deep}},
		{"raw-empty", "raw", wire.Value{Bytes: []byte{}}},
		{"raw-binary", "raw", wire.Value{Bytes: []byte{0, 0xff, 0, 0x80, 0xc0}}},
		{"raw-64k", "raw", wire.Value{Bytes: bin}},
	}
}

// fidelityRefused is a value no client may push: a placeholder in the
// encoded payload is replaced by bytes the encoder would not write.
type fidelityRefused struct {
	name, col   string
	placeholder wire.Value
	from, to    []byte
}

const intMarker = 0x000F0E0D0C0B0A09

func le64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func fidelityRefusedCases() []fidelityRefused {
	marker := le64(intMarker)
	return []fidelityRefused{
		{"i-2p53", "i", wire.Value{Int: intMarker}, marker, le64(1 << 53)},
		{"i-int64-max", "i", wire.Value{Int: intMarker}, marker, le64(math.MaxInt64)},
		{"i-int64-min", "i", wire.Value{Int: intMarker}, marker, le64(1 << 63)},
		{"s-invalid-utf8", "s", wire.Value{Str: "QQQ"}, []byte("QQQ"), []byte("Q\xffQ")},
		{"s-surrogate-utf8", "s", wire.Value{Str: "QQQ"}, []byte("QQQ"), []byte("\xed\xa0\x80")},
		{"s-overlong", "s", wire.Value{Str: "QQ"}, []byte("QQ"), []byte("\xc0\xaf")},
		{"s-nul", "s", wire.Value{Str: "QQQ"}, []byte("QQQ"), []byte("a\x00b")},
		{"j-nul-escape", "j", wire.Value{Str: `"QQQQQQQQ"`}, []byte("QQQQQQQQ"), []byte(`a\u0000b`)},
		{"j-not-json", "j", wire.Value{Str: `"QQQ"`}, []byte(`"QQQ"`), []byte(`{"a"`)},
		{"j-nan", "j", wire.Value{Str: `"QQQ"`}, []byte(`"QQQ"`), []byte(`NaN`)},
		{"j-two-docs", "j", wire.Value{Str: `"QQQ"`}, []byte(`"QQQ"`), []byte(`1 2`)},
		{"j-invalid-utf8", "j", wire.Value{Str: `"QQQ"`}, []byte(`"QQQ"`), []byte("\"\xff\"")},
	}
}

// fidelityRow is the full row of a case in project p1.
func fidelityRow(tbl *schema.CompiledTable, id, col string, v wire.Value) []wire.Value {
	vals := make([]wire.Value, len(tbl.Columns()))
	for i := range vals {
		vals[i] = wire.Value{Null: true}
	}
	vals[0], vals[1] = wire.Value{Str: id}, wire.Value{Str: fidelityProject(col, v)}
	i, _ := tbl.ColumnIndex(col)
	vals[i] = v
	return vals
}

// fidelityProject is the project of a case's row: p2 for a NaN and p3
// for a negative zero, which an image cannot hold (SQLite turns a NaN
// into NULL and reads -0 back as +0): their projects are served on the
// rows lane, and p1 on the image lane.
func fidelityProject(col string, v wire.Value) string {
	switch {
	case col == "f" && math.IsNaN(v.Float):
		return "p2"
	case col == "f" && v.Float == 0 && math.Signbit(v.Float):
		return "p3"
	}
	return "p1"
}

var fidelityProjects = []string{"p1", "p2", "p3"}

// sameValue compares two values of a column type: floats by their bits,
// bytes by content (nil and empty alike).
func sameValue(t wire.ColumnType, a, b wire.Value) bool {
	if a.Null || b.Null {
		return a.Null == b.Null
	}
	switch t {
	case wire.TypeInteger:
		return a.Int == b.Int
	case wire.TypeFloat:
		return math.Float64bits(a.Float) == math.Float64bits(b.Float)
	case wire.TypeBoolean:
		return a.Bool == b.Bool
	case wire.TypeBytes, wire.TypeCRDT:
		return bytes.Equal(a.Bytes, b.Bytes)
	}
	return a.Str == b.Str
}

func showValue(t wire.ColumnType, v wire.Value) string {
	s := fmt.Sprint(wire.GoValue(t, v))
	if t == wire.TypeFloat && !v.Null {
		s = fmt.Sprintf("%v (bits %016x)", v.Float, math.Float64bits(v.Float))
	}
	if len(s) > 80 {
		s = s[:80] + fmt.Sprintf("… (%d bytes)", len(s))
	}
	return s
}

// checkRows compares the rows a path delivered with the pushed values.
func checkRows(t *testing.T, path string, tbl *schema.CompiledTable, got map[string][]wire.Value, want map[string][]wire.Value) {
	t.Helper()
	cols := tbl.Columns()
	for id, w := range want {
		g, ok := got[id]
		if !ok {
			t.Errorf("%s: row %s missing", path, id)
			continue
		}
		for i, c := range cols {
			if !sameValue(c.Type, g[i], w[i]) {
				t.Errorf("%s: row %s column %s: got %s, want %s", path, id, c.Name, showValue(c.Type, g[i]), showValue(c.Type, w[i]))
			}
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			t.Errorf("%s: unexpected row %s", path, id)
		}
	}
}

func clientValues(c *sspclient.Client) map[string][]wire.Value {
	out := map[string][]wire.Value{}
	for id, r := range c.Rows("vals") {
		out[id] = r.Values
	}
	return out
}

func TestE2EValueFidelity(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e, tbl := newFidelityEnv(t, d)
		cols := tbl.Columns()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()

		// Incremental readers at every wire version, and a realtime reader,
		// subscribed before anything is written.
		incr := map[uint16]*sspclient.Client{}
		for _, v := range []uint16{1, 2, 3} {
			c := e.client("reader", sspclient.Options{WireVersion: v})
			if err := c.Subscribe("s", "vals", map[string][]string{"project_id": fidelityProjects}); err != nil {
				t.Fatal(err)
			}
			syncQuiet(t, c)
			incr[v] = c
		}
		live := map[uint16]*sspclient.Client{}
		sockets := map[uint16]*sspclient.Realtime{}
		for _, v := range []uint16{1, 2, 3} {
			c := e.client("reader", sspclient.Options{WireVersion: v})
			if err := c.Subscribe("s", "vals", map[string][]string{"project_id": fidelityProjects}); err != nil {
				t.Fatal(err)
			}
			syncQuiet(t, c)
			rt := dialInSync(ctx, t, c)
			defer rt.Close()
			live[v], sockets[v] = c, rt
		}

		// Every accepted value, pushed at wire versions 1 and 2 (full rows)
		// and 3 (sparse rows), each in one commit.
		want := map[string][]wire.Value{}
		for _, wv := range []uint16{1, 2, 3} {
			w := e.client("writer", sspclient.Options{WireVersion: wv})
			cid, err := w.Mutate(func(tx *sspclient.Tx) error {
				for _, c := range fidelityAccepted() {
					id := fmt.Sprintf("v%d-%s", wv, c.name)
					vals := fidelityRow(tbl, id, c.col, c.v)
					m := map[string]any{}
					for i, col := range cols {
						m[col.Name] = vals[i]
					}
					if err := tx.Upsert("vals", m); err != nil {
						return fmt.Errorf("%s: %w", id, err)
					}
					want[id] = vals
				}
				// Row ids that differ by a trailing space, case, Unicode
				// normalization, or sort apart in UTF-8 and UTF-16.
				for _, special := range []string{"😀", "\u2028", "\uFFFF", "\uE000", "\U0010FFFF", "é", "e\u0301", "A", "a", "a ", " "} {
					id := fmt.Sprintf("v%d-id-%s", wv, special)
					vals := fidelityRow(tbl, id, "s", wire.Value{Str: special})
					m := map[string]any{}
					for i, col := range cols {
						m[col.Name] = vals[i]
					}
					if err := tx.Upsert("vals", m); err != nil {
						return fmt.Errorf("%q: %w", id, err)
					}
					want[id] = vals
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			syncQuiet(t, w)
			if o, ok := w.Outcome(cid); !ok || o.Status != wire.PushApplied {
				t.Fatalf("wire version %d push of the accepted values: %s; want applied", wv, statusOf(o))
			}
			// The realtime readers get the commit as a delta.
			for v, rt := range sockets {
				m := nextMessage(t, rt)
				if m.Delta == nil {
					t.Fatalf("wire version %d commit: a wake-up instead of a delta for the v%d socket", wv, v)
				}
				if _, err := live[v].ApplyDelta(m.Delta); err != nil {
					t.Fatalf("v%d socket: apply delta: %v", v, err)
				}
			}
		}

		// Refused values: each in a commit after a valid operation, at
		// wire versions 2 and 3; nothing of the commit is written.
		epoch := e.partitionState().LogEpoch
		for _, rc := range fidelityRefusedCases() {
			for _, wv := range []uint16{2, 3} {
				id := fmt.Sprintf("bad-v%d-%s", wv, rc.name)
				good := fidelityRow(tbl, id+"-good", "s", wire.Value{Str: "fine"})
				bad := fidelityRow(tbl, id, rc.col, rc.placeholder)
				var ops []wire.Operation
				for _, row := range [][]wire.Value{good, bad} {
					var payload []byte
					var err error
					if wv == 3 {
						present := make([]bool, len(row))
						for i := range present {
							present[i] = true
						}
						payload, err = tbl.RowCodec().AppendSparse(nil, wire.SparseRow{Present: present, Values: row})
					} else {
						payload, err = tbl.RowCodec().AppendRow(nil, row)
					}
					if err != nil {
						t.Fatal(err)
					}
					ops = append(ops, wire.Operation{Table: "vals", RowID: row[0].Str, Op: wire.OpUpsert, Payload: payload})
				}
				if bytes.Count(ops[1].Payload, rc.from) != 1 {
					t.Fatalf("%s: the placeholder is not once in the payload", id)
				}
				ops[1].Payload = bytes.Replace(ops[1].Payload, rc.from, rc.to, 1)
				req := &wire.Request{Version: wv, Header: &wire.ReqHeader{ClientID: "raw-writer", SchemaVersion: 1, LogEpoch: &epoch},
					Commits: []*wire.PushCommit{{ClientCommitID: id, Operations: ops}}}
				r, err := e.postAs("writer", encodeRequest(t, req))
				if err != nil {
					t.Fatal(err)
				}
				var pr *wire.PushResult
				if r.status == 200 {
					for _, f := range decodeResponse(t, r).Frames {
						if p, ok := f.(*wire.PushResult); ok {
							pr = p
						}
					}
				}
				switch {
				case pr == nil:
					t.Errorf("%s: HTTP %d %.200s; want a PUSH_RESULT rejecting the commit", id, r.status, r.body)
				case pr.Status != wire.PushRejected || len(pr.Results) == 0 || pr.Results[len(pr.Results)-1].Code != "sync.invalid_request":
					t.Errorf("%s: %v %+v; want rejected with sync.invalid_request", id, pr.Status, pr.Results)
				}
			}
		}

		// The incremental readers, at every wire version.
		for v, c := range incr {
			syncQuiet(t, c)
			checkRows(t, fmt.Sprintf("incremental pull v%d", v), tbl, clientValues(c), want)
		}
		for v, c := range live {
			checkRows(t, fmt.Sprintf("realtime delta v%d", v), tbl, clientValues(c), want)
		}
		// The server's stored rows.
		stored := map[string][]wire.Value{}
		rows, err := e.store.ListRows(ctx, e2ePartition, "vals", nil, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			vals, err := tbl.RowCodec().DecodeRow(r.Payload)
			if err != nil {
				t.Fatalf("stored row %s: %v", r.RowID, err)
			}
			stored[r.RowID] = vals
		}
		checkRows(t, "stored rows", tbl, stored, want)

		// Bootstraps at every wire version: inline rows segments, and
		// segments by reference.
		for _, v := range []uint16{1, 2, 3} {
			for _, accept := range []uint8{wire.AcceptInlineRows, wire.AcceptExternalRows} {
				c := e.client("reader", sspclient.Options{WireVersion: v, Accept: accept, LimitSnapshotRows: 7})
				if err := c.Subscribe("s", "vals", map[string][]string{"project_id": fidelityProjects}); err != nil {
					t.Fatal(err)
				}
				syncQuiet(t, c)
				checkRows(t, fmt.Sprintf("bootstrap v%d accept %d", v, accept), tbl, clientValues(c), want)
			}
		}

		// The SQLite image lane (§5.3).
		inP1 := map[string][]wire.Value{}
		for id, w := range want {
			if w[1].Str == "p1" {
				inP1[id] = w
			}
		}
		img, ok := fidelityImageRows(ctx, t, e, tbl, epoch, "p1")
		if !ok {
			t.Errorf("sqlite image: the pull of p1 served no image")
		}
		checkRows(t, "sqlite image", tbl, img, inP1)
		for _, p := range []string{"p2", "p3"} {
			if _, ok := fidelityImageRows(ctx, t, e, tbl, epoch, p); ok {
				t.Errorf("sqlite image: the pull of %s served an image of a float SQLite does not keep", p)
			}
		}

		// Remote query over the typed projection.
		for id, w := range want {
			r := postOp(t, e, "reader", query("ops-client", "byID", remotewire.Object{{Key: "id", Value: id}}))
			fi, _ := tbl.ColumnIndex("f")
			switch f := w[fi].Float; {
			case w[fi].Null:
			case math.IsInf(f, 0):
				// REMOTE.md §4 carries finite numbers only.
				if r.code() != "operation.query_failed" {
					t.Errorf("remote query of %s: HTTP %d %v; want operation.query_failed", id, r.status, r.msg)
				}
				continue
			case math.IsNaN(f):
				// Neither typed projection holds a NaN: NULL.
				w = slices.Clone(w)
				w[fi] = wire.Value{Null: true}
			case f == 0 && math.Signbit(f) && d.name == "sqlite":
				// SQLite's REAL keeps no negative zero (docs/schema.md).
				w = slices.Clone(w)
				w[fi] = wire.Value{Float: 0}
			}
			if ji, _ := tbl.ColumnIndex("j"); d.name == "postgres" && !w[ji].Null && !jsonb.Holds(w[ji].Str) {
				// A document jsonb refuses is projected as NULL.
				w = slices.Clone(w)
				w[ji] = wire.Value{Null: true}
			}
			if r.code() != "" {
				t.Errorf("remote query of %s: %s %v", id, r.code(), r.msg["message"])
				continue
			}
			got, _ := r.msg["rows"].([]any)
			if len(got) != 1 {
				t.Errorf("remote query of %s: %d rows (HTTP %d %v)", id, len(got), r.status, r.msg)
				continue
			}
			row := got[0].(map[string]any)
			for i, c := range cols {
				if p := remoteMismatch(c.Type, row[c.Name], w[i]); p != "" {
					t.Errorf("remote query: row %s column %s: %s", id, c.Name, p)
				}
			}
		}
	})
}

// newFidelityEnv is a server of fidelitySchema with the remote query
// byID, which reads a row's every column by its id.
func newFidelityEnv(t *testing.T, d e2eDriver) (*e2eEnv, *schema.CompiledTable) {
	t.Helper()
	sc := fidelitySchema(t)
	tbl, _ := sc.Table("vals")
	var names []string
	var rcols []syncgo.ResultColumn
	for _, c := range tbl.Columns() {
		names = append(names, c.Name)
		rcols = append(rcols, syncgo.ResultColumn{Name: c.Name, Type: c.Type, Nullable: c.Nullable})
	}
	ops := syncgo.Operations{Queries: []syncgo.Query{{
		ID:      "byID",
		SQL:     "SELECT " + strings.Join(names, ", ") + " FROM vals WHERE id = :id",
		Params:  []syncgo.Param{{Name: "id", Type: wire.TypeString}},
		Columns: rcols, MaxRows: 10,
		Coverage: func(syncgo.Params) ([]syncgo.Coverage, error) {
			return []syncgo.Coverage{{Table: "vals", Scopes: map[string][]string{"project_id": {syncgo.AllAllowed}}}}, nil
		},
	}}}
	e := newE2EEnv(t, d, func(c *syncgo.Config) { c.Schema, c.Operations = sc, ops })
	e.schema = sc
	return e, tbl
}

// fidelityImageRows pulls the rows of a project on the sqlite lane and
// reads the image's rows; false when the pull served no image.
func fidelityImageRows(ctx context.Context, t *testing.T, e *e2eEnv, tbl *schema.CompiledTable, epoch, project string) (map[string][]wire.Value, bool) {
	t.Helper()
	req := &wire.Request{Version: 3, Header: &wire.ReqHeader{ClientID: "image-reader", SchemaVersion: 1, LogEpoch: &epoch},
		Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows | wire.AcceptExternalRows | wire.AcceptSQLite, LimitSnapshotRows: 2},
		Subscriptions: []*wire.Subscription{{ID: "s", Table: "vals", Cursor: -1,
			Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{project}}}}}}
	r, err := e.postAs("reader", encodeRequest(t, req))
	if err != nil {
		t.Fatal(err)
	}
	var ref *wire.SegmentRef
	for _, f := range decodeResponse(t, r).Frames {
		if s, ok := f.(*wire.SegmentRef); ok && s.MediaType == wire.MediaSQLite {
			ref = s
		}
	}
	if ref == nil {
		return nil, false
	}
	c := e.client("reader", sspclient.Options{})
	b, err := c.DownloadSegment(ctx, ref.SegmentID, map[string][]string{"project_id": {project}})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := sqliteimage.ReadRows(ctx, b, tbl.WireColumns(), tbl.PrimaryKey())
	if err != nil {
		t.Fatalf("sqlite image: %v", err)
	}
	out := map[string][]wire.Value{}
	for _, r := range rows {
		out[r.Values[0].Str] = r.Values
	}
	return out, true
}

// remoteMismatch describes how a remote query's value differs from the
// pushed one, or "". JSON documents compare as JSON values (the query
// returns the document's text; key order and spacing may differ).
func remoteMismatch(t wire.ColumnType, got any, want wire.Value) string {
	if want.Null {
		if got != nil {
			return fmt.Sprintf("got %v, want null", got)
		}
		return ""
	}
	bad := func() string { return fmt.Sprintf("got %T %.80v, want %s", got, got, showValue(t, want)) }
	switch t {
	case wire.TypeString:
		if s, ok := got.(string); !ok || s != want.Str {
			return bad()
		}
	case wire.TypeInteger:
		if f, ok := got.(float64); !ok || f != float64(want.Int) {
			return bad()
		}
	case wire.TypeFloat:
		if f, ok := got.(float64); !ok || math.Float64bits(f) != math.Float64bits(want.Float) {
			return bad()
		}
	case wire.TypeBoolean:
		if b, ok := got.(bool); !ok || b != want.Bool {
			return bad()
		}
	case wire.TypeBytes:
		if b, ok := got.([]byte); !ok || !bytes.Equal(b, want.Bytes) {
			return bad()
		}
	case wire.TypeJSON:
		s, ok := got.(string)
		if !ok {
			return bad()
		}
		if !sameJSON(s, want.Str) {
			return fmt.Sprintf("got the JSON text %.80q, want %.80q", s, want.Str)
		}
	}
	return ""
}

// sameJSON reports whether two JSON texts hold the same value: objects
// by their members (the last of duplicate keys), numbers by their decimal
// value (Postgres's jsonb writes 1e400 in full and has no -0).
func sameJSON(a, b string) bool {
	if a == b {
		return true
	}
	parse := func(s string) (any, bool) {
		d := json.NewDecoder(strings.NewReader(s))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			return nil, false
		}
		return v, true
	}
	va, ok1 := parse(a)
	vb, ok2 := parse(b)
	return ok1 && ok2 && sameJSONValue(va, vb)
}

func sameJSONValue(a, b any) bool {
	switch x := a.(type) {
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		fx, _, err1 := big.ParseFloat(string(x), 10, 4096, big.ToNearestEven)
		fy, _, err2 := big.ParseFloat(string(y), 10, 4096, big.ToNearestEven)
		return err1 == nil && err2 == nil && fx.Cmp(fy) == 0
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameJSONValue(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			if w, ok := y[k]; !ok || !sameJSONValue(v, w) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

// A scope value is at most 512 bytes (docs/schema.md), whatever the scope
// column's type: a json scope column's value over it is refused with
// sync.invalid_request on both drivers, nothing written. It used to be
// checked for string columns only: SQLite stored a longer json scope
// value, and Postgres failed the commit (its scope index refuses an entry
// over about 2.7 KB) with HTTP 500 sync.internal_error, retryable, on
// every retry.
func TestE2EJSONScopeValueLimit(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		sc, err := schema.New(1).
			Table("docs", "id", schema.String("id"), schema.JSON("tag"), schema.String("body").Null()).
			Scope("tag:{tag}").Compile()
		if err != nil {
			t.Fatal(err)
		}
		e := newE2EEnv(t, d, func(c *syncgo.Config) { c.Schema = sc })
		e.schema = sc
		e.allow("alice", map[string][]string{"tag": {"*"}})
		c := e.client("alice", sspclient.Options{})
		// An incompressible JSON string of n bytes.
		tag := func(n int) string {
			var b strings.Builder
			b.WriteByte('"')
			for i := 0; b.Len() < n-1; i++ {
				b.WriteRune(rune(0x4e00 + (i*7919)%20000)) // 3 bytes each
			}
			s := b.String()[:n-1-((n-2)%3)]
			return s + strings.Repeat("x", n-1-len(s)) + `"`
		}
		for _, tc := range []struct {
			n    int
			want wire.PushStatus
		}{{512, wire.PushApplied}, {513, wire.PushRejected}, {4000, wire.PushRejected}} {
			v := tag(tc.n)
			if len(v) != tc.n || !json.Valid([]byte(v)) {
				t.Fatalf("tag of %d bytes: %d bytes, valid %v", tc.n, len(v), json.Valid([]byte(v)))
			}
			id := fmt.Sprintf("d%d", tc.n)
			cid, err := c.Upsert("docs", map[string]any{"id": id, "tag": v, "body": "x"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.SyncUntilQuiet(context.Background(), 5); err != nil {
				t.Fatalf("scope value of %d bytes: %v", tc.n, err)
			}
			o, _ := c.Outcome(cid)
			if o.Status != tc.want || (tc.want == wire.PushRejected && o.ErrorCode() != "sync.invalid_request") {
				t.Errorf("scope value of %d bytes: %s; want %v", tc.n, statusOf(o), tc.want)
			}
			_, err = e.store.PushResult(context.Background(), e2ePartition, c.ClientID(), cid)
			if err != nil {
				t.Fatalf("push result of %s: %v", cid, err)
			}
			rows, err := e.store.ListRows(context.Background(), e2ePartition, "docs", nil, 10)
			if err != nil {
				t.Fatal(err)
			}
			stored := false
			for _, r := range rows {
				stored = stored || r.RowID == id
			}
			if stored != (tc.want == wire.PushApplied) {
				t.Errorf("scope value of %d bytes: row stored %v", tc.n, stored)
			}
		}
	})
}

// A sparse update (wire version 3) writes the present columns only: an
// absent column keeps its value, a present NULL clears it, in the synced
// row and in the typed projection a remote query reads, on both drivers.
func TestE2EValueFidelitySparseUpdates(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e, tbl := newFidelityEnv(t, d)
		w := e.client("writer", sspclient.Options{})
		r := e.client("reader", sspclient.Options{})
		if err := r.Subscribe("s", "vals", map[string][]string{"project_id": {"p1"}}); err != nil {
			t.Fatal(err)
		}
		row := map[string]any{"id": "r1", "project_id": "p1", "s": "a", "i": int64(7), "f": 1.5, "b": true,
			"j": `{"a":1}`, "raw": []byte{1, 2}}
		steps := []map[string]any{
			row,
			{"id": "r1", "s": "b"},
			{"id": "r1", "j": nil, "i": int64(wire.MaxSafeInteger), "raw": []byte{}},
			{"id": "r1", "f": math.Copysign(0, -1), "b": nil, "s": ""},
		}
		want := map[string]any{}
		for n, step := range steps {
			for k, v := range step {
				want[k] = v
			}
			cid, err := w.Upsert("vals", step)
			if err != nil {
				t.Fatal(err)
			}
			syncQuiet(t, w)
			if o, ok := w.Outcome(cid); !ok || o.Status != wire.PushApplied {
				t.Fatalf("step %d: %s", n, statusOf(o))
			}
			syncQuiet(t, r)
			vals := fidelityRow(tbl, "r1", "s", wire.Value{Null: true})
			for i, c := range tbl.Columns() {
				v, err := wire.ValueOf(c.Type, want[c.Name])
				if err != nil {
					t.Fatal(err)
				}
				vals[i] = v
			}
			checkRows(t, fmt.Sprintf("step %d: pull", n), tbl, clientValues(r), map[string][]wire.Value{"r1": vals})
			q := postOp(t, e, "reader", query("ops-client", "byID", remotewire.Object{{Key: "id", Value: "r1"}}))
			rows, _ := q.msg["rows"].([]any)
			if q.code() != "" || len(rows) != 1 {
				t.Fatalf("step %d: remote query: %v", n, q.msg)
			}
			got := rows[0].(map[string]any)
			for i, c := range tbl.Columns() {
				wv := vals[i]
				if c.Type == wire.TypeFloat && !wv.Null && wv.Float == 0 && d.name == "sqlite" {
					wv.Float = 0 // SQLite's REAL keeps no negative zero
				}
				if p := remoteMismatch(c.Type, got[c.Name], wv); p != "" {
					t.Errorf("step %d: remote query column %s: %s", n, c.Name, p)
				}
			}
		}
	})
}

// A remote query's string parameter holding a NUL character is
// operation.invalid_request on both drivers. It used to run: SQLite
// answered no rows and Postgres, whose text cannot hold the character,
// operation.query_failed.
func TestE2ERemoteParamNUL(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e, _ := newFidelityEnv(t, d)
		for _, p := range []string{"a\x00b", "\x00"} {
			q := postOp(t, e, "reader", query("ops-client", "byID", remotewire.Object{{Key: "id", Value: p}}))
			if q.code() != "operation.invalid_request" {
				t.Errorf("param %q: HTTP %d %v; want operation.invalid_request", p, q.status, q.msg)
			}
		}
		q := postOp(t, e, "reader", query("ops-client", "byID", remotewire.Object{{Key: "id", Value: "a\u2028😀"}}))
		if rows, ok := q.msg["rows"].([]any); q.code() != "" || !ok || len(rows) != 0 {
			t.Errorf("param without NUL: %v; want no rows", q.msg)
		}
	})
}
