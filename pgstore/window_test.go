package pgstore

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// TestWindowRawEqualsScan: the window read's raw fast path (fromRaw)
// is taken for the real statement, and reads every row as pgx's Scan
// does: commits and changes, a delete without payload or version, scopes
// in both stored forms, and a commit pruned under the window (no commit
// row).
func TestWindowRawEqualsScan(t *testing.T) {
	s := openStore(t)
	c := testSchema(t, 1)
	ensure(t, s, c)
	ctx := context.Background()
	const p = "p1"
	var seqs []int64
	for i, id := range []string{"t1", "t2", "t3"} {
		seqs = append(seqs, apply(t, s, p,
			task{id: id, project: "a", owner: "o1", title: ptr("title " + id), rank: ptr(int64(i))}.write(t, c, 1),
			task{id: id + "x", project: "a", owner: "o2"}.write(t, c, 1)))
	}
	del := task{id: "t1", project: "a", owner: "o1"}.write(t, c, 2)
	err := s.Write(ctx, p, func(ctx context.Context, tx store.WriteTx) error {
		seq, err := tx.AppendCommit(ctx, store.NewCommit{ClientID: "c2", ClientCommitID: "del", ActorID: "a2", CreatedAtMs: 2000,
			Changes: []store.Change{{Table: "tasks", RowID: "t1", Op: wire.OpDelete, Scopes: del.Scopes}}})
		seqs = append(seqs, seq)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// The reference's form: the JSON text as a JSONB string.
	if _, err := s.pool.Exec(ctx, `UPDATE sync_changes SET scopes = to_jsonb(scopes::text) WHERE commit_seq = $1 AND idx = 1`, seqs[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM sync_commits WHERE commit_seq = $1`, seqs[2]); err != nil {
		t.Fatal(err)
	}
	rows, err := s.pool.Query(ctx, sqlCommitWindow, p, "tasks", "project_id", []string{"a"}, int64(0), seqs[len(seqs)-1], 100)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	ok, jsonbBinary := rawWindowFormats(rows.FieldDescriptions())
	if !ok {
		t.Fatalf("the window statement's result is not in the binary formats fromRaw reads: %+v", rows.FieldDescriptions())
	}
	var ws windowScan
	n, pruned, deletes := 0, 0, 0
	for rows.Next() {
		var raw, scanned windowRow
		if err := raw.fromRaw(rows.RawValues(), jsonbBinary, &ws); err != nil {
			t.Fatal(err)
		}
		rawScopes := bytes.Clone(raw.scopes)
		if err := scanned.scan(rows); err != nil {
			t.Fatal(err)
		}
		n++
		if !raw.commit {
			pruned++
		}
		if raw.change && raw.op == wire.OpDelete {
			deletes++
			if raw.payload != nil || raw.rowVersion != 0 {
				t.Errorf("delete read with payload %x, version %d", raw.payload, raw.rowVersion)
			}
		}
		if raw.seq != scanned.seq || raw.commit != scanned.commit || raw.change != scanned.change ||
			raw.createdAt != scanned.createdAt || raw.actor != scanned.actor || raw.client != scanned.client ||
			raw.clientCommit != scanned.clientCommit || raw.rowID != scanned.rowID || raw.op != scanned.op ||
			raw.rowVersion != scanned.rowVersion || !bytes.Equal(raw.payload, scanned.payload) ||
			(raw.payload == nil) != (scanned.payload == nil) {
			t.Errorf("row %d: raw %+v, scanned %+v", n, raw, scanned)
		}
		if raw.change {
			a, err1 := decodeScopes(rawScopes)
			b, err2 := decodeScopes(scanned.scopes)
			if err1 != nil || err2 != nil || !slices.Equal(a, b) || len(a) != 2 {
				t.Errorf("row %d: scopes %v (%v) from raw %q, %v (%v) scanned", n, a, err1, rawScopes, b, err2)
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != 7 || pruned != 2 || deletes != 1 {
		t.Errorf("%d rows, %d of a pruned commit, %d deletes; want 7, 2, 1", n, pruned, deletes)
	}
}

// TestWindowRangeAndProbe: a scope whose commits are dense in the log is
// read by range (sqlRangeCommits, sqlRangeChanges), skipping the other scopes' commits in
// between and a pruned candidate; a sparse one by probes; both give the
// scope's commits in order, whole, within the change limit.
func TestWindowRangeAndProbe(t *testing.T) {
	s := openStore(t)
	s.shortWindow = 0 // the paged reads, however short the log
	c := testSchema(t, 1)
	ensure(t, s, c)
	ctx := context.Background()
	const p = "p1"
	want := map[string][]int64{}
	var pruned int64
	for i := range 40 {
		project := "a"
		switch {
		case i%10 == 9:
			project = "c" // sparse: 4 commits over 31 sequences
		case i%3 == 2:
			project = "b"
		}
		id := fmt.Sprintf("r%d", i)
		seq := apply(t, s, p, task{id: id, project: project, owner: "o"}.write(t, c, 1),
			task{id: id + "x", project: project, owner: "o"}.write(t, c, 1))
		if project == "a" && i == 7 {
			pruned = seq
			continue
		}
		want[project] = append(want[project], seq)
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM sync_commits WHERE commit_seq = $1`, pruned); err != nil {
		t.Fatal(err)
	}
	through := queryInt(t, s, `SELECT max(commit_seq) FROM sync_commits`)
	for _, project := range []string{"a", "b", "c"} {
		for _, limit := range []int{0, 2, 5, 7} {
			var got []int64
			cursor := int64(0)
			for range 100 {
				w, err := s.ReadCommitWindow(ctx, p, store.CommitWindowQuery{Table: "tasks", Scopes: scope("project_id", project),
					AfterSeq: cursor, ThroughSeq: through, LimitChanges: limit})
				if err != nil {
					t.Fatal(err)
				}
				changes := 0
				for _, cm := range w.Commits {
					got = append(got, cm.Seq)
					changes += len(cm.Changes)
					if len(cm.Changes) != 2 || cm.ActorID != "a1" || cm.ClientID != "c1" {
						t.Errorf("%s: commit %d: %d changes, actor %q, client %q", project, cm.Seq, len(cm.Changes), cm.ActorID, cm.ClientID)
					}
					for _, ch := range cm.Changes {
						if v, _ := lookup(ch.Scopes, "project_id"); v != project {
							t.Errorf("%s: commit %d: a change of scope %v", project, cm.Seq, ch.Scopes)
						}
					}
				}
				if limit > 0 && changes > max(limit, 2) {
					t.Errorf("%s limit %d: %d changes in a window", project, limit, changes)
				}
				if w.Complete {
					break
				}
				if len(w.Commits) == 0 {
					t.Fatalf("%s limit %d: an incomplete empty window after %d", project, limit, cursor)
				}
				cursor = w.Commits[len(w.Commits)-1].Seq
			}
			if !slices.Equal(got, want[project]) {
				t.Errorf("%s limit %d: commits %v, want %v", project, limit, got, want[project])
			}
		}
	}
}

func lookup(sc wire.StoredScopes, key string) (string, bool) {
	for _, e := range sc {
		if e.Key == key {
			return e.Value, true
		}
	}
	return "", false
}

// TestWindowRawHeadsAndCandidates: the commit rows and the candidates of
// a range read come in the binary formats that readHeads and candidates
// read from pgx's raw values (else they fall back to Scan, correct but
// allocating per row), and the raw reads equal Scan's.
func TestWindowRawHeadsAndCandidates(t *testing.T) {
	s := openStore(t)
	c := testSchema(t, 1)
	ensure(t, s, c)
	ctx := context.Background()
	const p = "p1"
	var seqs []int64
	for i := range 3 {
		seqs = append(seqs, apply(t, s, p, task{id: fmt.Sprintf("t%d", i), project: "a", owner: "o"}.write(t, c, 1)))
	}
	lo, hi := seqs[0], seqs[len(seqs)-1]

	rows, err := s.pool.Query(ctx, sqlRangeCommits, p, lo, hi)
	if err != nil {
		t.Fatal(err)
	}
	if !rawHeadFormats(rows.FieldDescriptions()) {
		rows.Close()
		t.Fatalf("sqlRangeCommits' result is not in the formats readHeads reads raw: %+v", rows.FieldDescriptions())
	}
	var raw []commitHead
	for rows.Next() {
		v := rows.RawValues()
		seq, ok1 := rawInt8(v[0])
		at, ok2 := rawInt8(v[1])
		if !ok1 || !ok2 {
			t.Fatalf("raw int8s %x, %x", v[0], v[1])
		}
		raw = append(raw, commitHead{seq: seq, createdAt: at, actor: string(v[2]), client: string(v[3]), clientCommit: string(v[4])})
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows, err = s.pool.Query(ctx, sqlRangeCommits, p, lo, hi)
	if err != nil {
		t.Fatal(err)
	}
	var scanned []commitHead
	for rows.Next() {
		var h commitHead
		if err := rows.Scan(&h.seq, &h.createdAt, &h.actor, &h.client, &h.clientCommit); err != nil {
			t.Fatal(err)
		}
		scanned = append(scanned, h)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(raw) != len(seqs) || !slices.Equal(raw, scanned) {
		t.Errorf("commit rows raw %+v, scanned %+v; want %d", raw, scanned, len(seqs))
	}

	w := windowReader{}
	cands, err := w.candidates(ctx, s, p, "tasks", wire.ScopeValues{Key: "project_id", Values: []string{"a"}}, 0, hi, 10)
	if err != nil || !slices.Equal(cands, seqs) {
		t.Errorf("candidates = %v, %v; want %v", cands, err, seqs)
	}
	rows, err = s.pool.Query(ctx, sqlWindowCandidates, p, "tasks", "project_id", []string{"a"}, int64(0), hi, 10)
	if err != nil {
		t.Fatal(err)
	}
	fds := rows.FieldDescriptions()
	rows.Close()
	if len(fds) != 1 || fds[0].DataTypeOID != pgtype.Int8OID || fds[0].Format != pgtype.BinaryFormatCode {
		t.Errorf("the candidates' column is not a binary int8: %+v", fds)
	}
}

// TestRangeChangesSameScopes: sqlRangeChanges sends NULL instead of the
// scopes of exactly the changes whose stored scopes equal the window's
// one value per key, and a window read by ranges gives every change its
// stored scopes either way (those sent as NULL and those sent whole),
// bulk or by candidates.
func TestRangeChangesSameScopes(t *testing.T) {
	s := openStore(t)
	s.shortWindow = 0 // the paged reads, however short the log
	c := testSchema(t, 1)
	ensure(t, s, c)
	ctx := context.Background()
	const p = "p1"
	tasks := []task{{id: "t0", project: "a", owner: "o"}, {id: "t1", project: "a", owner: "o2"},
		{id: "t2", project: "b", owner: "o"}, {id: "t3", project: "a", owner: "o"}}
	var seqs []int64
	for _, tk := range tasks {
		seqs = append(seqs, apply(t, s, p, tk.write(t, c, 1)))
	}
	lo, hi := seqs[0], seqs[len(seqs)-1]
	both := wire.ScopeMap{{Key: "owner_id", Values: []string{"o"}}, {Key: "project_id", Values: []string{"a"}}}

	var w windowReader
	w.sameScopes(both)
	if w.same == nil {
		t.Fatal("no same scopes for one value per key")
	}
	rows, err := s.pool.Query(ctx, sqlRangeChanges, p, "tasks", lo, hi, w.sameArg())
	if err != nil {
		t.Fatal(err)
	}
	var nulls []string
	for rows.Next() {
		v := rows.RawValues()
		if v[8] == nil {
			nulls = append(nulls, string(v[5]))
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(nulls, []string{"t0", "t3"}) {
		t.Errorf("changes sent without their scopes: %v, want t0 and t3 (the ones storing owner o, project a)", nulls)
	}
	for _, multi := range []wire.ScopeMap{{{Key: "project_id", Values: []string{"a", "b"}}}, {{Key: "owner_id", Values: []string{"o", "o"}}, {Key: "project_id", Values: []string{"a", "c"}}}} {
		var m windowReader
		if m.sameScopes(multi); m.same != nil || m.sameArg() != nil {
			t.Errorf("same scopes %v for %v, want none (two values of a key)", m.same, multi)
		}
	}

	for _, tc := range []struct {
		scopes wire.ScopeMap
		want   []string // row ids, each change's scopes checked against its task
	}{
		{both, []string{"t0", "t3"}},
		{wire.ScopeMap{{Key: "project_id", Values: []string{"a"}}}, []string{"t0", "t1", "t3"}},
		{wire.ScopeMap{{Key: "project_id", Values: []string{"a", "b"}}}, []string{"t0", "t1", "t2", "t3"}},
	} {
		for _, bulk := range []bool{false, true} {
			win, err := s.ReadCommitWindow(ctx, p, store.CommitWindowQuery{Table: "tasks", Scopes: tc.scopes, ThroughSeq: hi, LimitChanges: 100, Bulk: bulk})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, cm := range win.Commits {
				for _, ch := range cm.Changes {
					got = append(got, ch.RowID)
					var tk task
					for _, x := range tasks {
						if x.id == ch.RowID {
							tk = x
						}
					}
					want := wire.StoredScopes{{Key: "owner_id", Value: tk.owner}, {Key: "project_id", Value: tk.project}}
					if !slices.Equal(ch.Scopes, want) {
						t.Errorf("%v bulk %v: %s has scopes %v, want %v", tc.scopes, bulk, ch.RowID, ch.Scopes, want)
					}
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("%v bulk %v: window %v, want %v", tc.scopes, bulk, got, tc.want)
			}
			if win.Release != nil {
				win.Release()
			}
		}
	}
}

// TestWindowWireOnly: a WireOnly window is the window read without it
// but for the commits' client ids, which it leaves empty, on every read
// path (short, by candidates, bulk by ranges).
func TestWindowWireOnly(t *testing.T) {
	s := openStore(t)
	c := testSchema(t, 1)
	ensure(t, s, c)
	ctx := context.Background()
	const p = "p1"
	var hi int64
	for i := range 12 {
		hi = apply(t, s, p, task{id: fmt.Sprintf("t%d", i), project: []string{"a", "b"}[i%3/2], owner: "o"}.write(t, c, 1))
	}
	for _, short := range []int64{shortWindowCommits, 0} {
		s.shortWindow = short
		for _, bulk := range []bool{false, true} {
			q := store.CommitWindowQuery{Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"a"}}},
				ThroughSeq: hi, LimitChanges: 5, Bulk: bulk}
			full, err := s.ReadCommitWindow(ctx, p, q)
			if err != nil {
				t.Fatal(err)
			}
			q.WireOnly = true
			only, err := s.ReadCommitWindow(ctx, p, q)
			if err != nil {
				t.Fatal(err)
			}
			if len(full.Commits) != 5 || len(only.Commits) != len(full.Commits) || only.Complete != full.Complete {
				t.Fatalf("short %d bulk %v: %d commits wire-only, %d without, want 5 both", short, bulk, len(only.Commits), len(full.Commits))
			}
			for i, fc := range full.Commits {
				wc := only.Commits[i]
				if fc.ClientID == "" || fc.ClientCommitID == "" {
					t.Fatalf("commit %d read without its client ids: %+v", fc.Seq, fc)
				}
				if s.shortWindow == 0 && (wc.ClientID != "" || wc.ClientCommitID != "") {
					t.Errorf("short %d bulk %v: a paged wire-only commit %d read its client ids %q %q", short, bulk, wc.Seq, wc.ClientID, wc.ClientCommitID)
				}
				wc.ClientID, wc.ClientCommitID = fc.ClientID, fc.ClientCommitID
				if !reflect.DeepEqual(wc, fc) {
					t.Errorf("short %d bulk %v: commit %d wire-only %+v, without %+v", short, bulk, fc.Seq, wc, fc)
				}
			}
		}
	}
}
