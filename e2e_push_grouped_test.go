package syncgo_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// pushResults returns a response's PUSH_RESULT frames in order.
func pushResults(m *wire.Message) []*wire.PushResult {
	var out []*wire.PushResult
	for _, f := range m.Frames {
		if pr, ok := f.(*wire.PushResult); ok {
			out = append(out, pr)
		}
	}
	return out
}

// storeWrites is the store's count of Write calls that committed.
func storeWrites(t *testing.T, st store.Store) int64 {
	t.Helper()
	s, ok := st.(interface{ Stats() store.Stats })
	if !ok {
		t.Fatalf("%T has no Stats", st)
	}
	return s.Stats().Writes
}

// The commits of one request (a client flushing its outbox, §7: up to
// 500 operations per request by default) go through the write boundary
// together, in one Write, and each is applied exactly as if it came
// alone, in order: a commit sees the one before it (a chain of versioned
// updates of one row, each with the version the previous one made), a
// stale one is rejected and rolled back alone, a delete of an absent row
// is applied at the log position reached so far, a repeated id is
// answered cached, and the appended commits take dense sequences. Fails
// when the commits are written one Write each (30-32 Writes), or when the
// grouped path breaks sequential semantics.
func TestE2EPushGroupedCommits(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d)
		syncQuiet(t, e.client("alice", sspclient.Options{}))
		epoch := e.partitionState().LogEpoch
		base := e.partitionState().MaxCommitSeq
		version := func(v int64) *int64 { return &v }
		var commits []*wire.PushCommit
		add := func(id string, op wire.Operation) {
			commits = append(commits, &wire.PushCommit{ClientCommitID: id, Operations: []wire.Operation{op}})
		}
		type want struct {
			status wire.PushStatus
			seq    int64
		}
		var wants []want
		add("c00", e.upsertOp(t, taskRow("t1", "p1", "v1")))
		wants = append(wants, want{wire.PushApplied, base + 1})
		for i := int64(1); i <= 9; i++ { // each needs the version the commit before made
			op := e.upsertOp(t, taskRow("t1", "p1", fmt.Sprintf("v%d", i+1)))
			op.BaseVersion = version(i)
			add(fmt.Sprintf("c%02d", i), op)
			wants = append(wants, want{wire.PushApplied, base + 1 + i})
		}
		stale := e.upsertOp(t, taskRow("t1", "p1", "stale"))
		stale.BaseVersion = version(1)
		add("c10", stale)
		wants = append(wants, want{wire.PushRejected, 0})
		add("c11", wire.Operation{Table: "tasks", RowID: "absent", Op: wire.OpDelete})
		wants = append(wants, want{wire.PushApplied, base + 10}) // the newest position: c09's
		add("c05", commits[5].Operations[0])
		wants = append(wants, want{wire.PushCached, base + 6})
		for i := int64(13); i < 30; i++ {
			add(fmt.Sprintf("c%02d", i), e.upsertOp(t, taskRow(fmt.Sprintf("r%02d", i), "p1", "new")))
			wants = append(wants, want{wire.PushApplied, base + i - 2})
		}
		req := &wire.Request{Version: 3, Header: &wire.ReqHeader{ClientID: "outbox-device", SchemaVersion: 1, LogEpoch: &epoch},
			Commits: commits}
		check := func(round string, m *wire.Message) {
			t.Helper()
			got := pushResults(m)
			if len(got) != len(wants) {
				t.Fatalf("%s: %d PUSH_RESULTs, want %d", round, len(got), len(wants))
			}
			for i, w := range wants {
				if got[i].ClientCommitID != commits[i].ClientCommitID || got[i].Status != w.status || got[i].CommitSeq != w.seq {
					t.Fatalf("%s: result %d is %s %s seq %d, want %s %s seq %d", round, i, got[i].ClientCommitID, got[i].Status,
						got[i].CommitSeq, commits[i].ClientCommitID, w.status, w.seq)
				}
			}
		}
		before := storeWrites(t, e.store)
		check("first delivery", decodeResponse(t, e.post(t, body(encodeRequest(t, req)), nil)))
		// One Write for the run; the others are the store's own (the
		// deferred client records flushed), a few at most.
		if n := storeWrites(t, e.store) - before; n > 10 {
			t.Fatalf("the request's 30 commits took %d store writes; want them in one (and a few of the store's own)", n)
		}
		if p := e.partitionState(); p.MaxCommitSeq != base+27 {
			t.Fatalf("MaxCommitSeq %d, want %d (27 appended commits)", p.MaxCommitSeq, base+27)
		}
		rows := e.serverRows("tasks")
		if rows["t1"] != e.renderTask(t, 10, taskRow("t1", "p1", "v10")) {
			t.Fatalf("t1 is %s; want version 10, title v10 (the stale upsert rolled back)", rows["t1"])
		}
		if len(rows) != 18 {
			t.Fatalf("%d rows, want t1 and r13..r29", len(rows))
		}
		// The whole request again: every applied commit answers cached,
		// the rejection replays as itself, nothing is appended.
		for i := range wants {
			if wants[i].status == wire.PushApplied {
				wants[i].status = wire.PushCached
			}
		}
		check("replay", decodeResponse(t, e.post(t, body(encodeRequest(t, req)), nil)))
		if p := e.partitionState(); p.MaxCommitSeq != base+27 {
			t.Fatalf("after the replay MaxCommitSeq is %d, want %d", p.MaxCommitSeq, base+27)
		}
	})
}

// appendFault wraps a store so that appending the commit with a chosen
// client commit id fails, as a storage failure would.
type appendFault struct {
	store.Store
	failID atomic.Pointer[string]
}

func (f *appendFault) wrap(fn func(context.Context, store.WriteTx) error) func(context.Context, store.WriteTx) error {
	return func(ctx context.Context, tx store.WriteTx) error { return fn(ctx, faultTx{WriteTx: tx, f: f}) }
}

func (f *appendFault) Write(ctx context.Context, partition string, fn func(context.Context, store.WriteTx) error) error {
	return f.Store.Write(ctx, partition, f.wrap(fn))
}

type faultTx struct {
	store.WriteTx
	f *appendFault
}

func (t faultTx) AppendCommit(ctx context.Context, c store.NewCommit) (int64, error) {
	if id := t.f.failID.Load(); id != nil && *id == c.ClientCommitID {
		return 0, errInjected
	}
	return t.WriteTx.AppendCommit(ctx, c)
}

// localFault is appendFault over SQLite's in-process writer, aheadFault
// over Postgres's reading ahead: each keeps the capability the engine
// groups a request's commits by.
type localFault struct{ *appendFault }

func (localFault) LocalWriter() {}

type aheadFault struct{ *appendFault }

func (a aheadFault) WriteReadAhead(ctx context.Context, partition string, reads store.WriteReads, fn func(context.Context, store.WriteTx) error) error {
	return a.Store.(store.ReadAheadWriter).WriteReadAhead(ctx, partition, reads, a.wrap(fn))
}

// When a commit of a request fails (a storage failure, not a rejection),
// the commits before it are applied and durable and the ones after it are
// not attempted, as when the commits are pushed one request each: the
// grouped Write undoes them all, and the engine then applies them one by
// one. The client's retry gets the applied ones cached and the rest
// applied in order. Fails when a grouped failure leaves the prefix
// unapplied (MaxCommitSeq 0 after the first request) or applies past the
// failed commit.
func TestE2EPushGroupedFailureKeepsPrefix(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		f := &appendFault{}
		e := newE2EEnv(t, d, func(cfg *syncgo.Config) {
			f.Store = cfg.Store
			if _, ok := cfg.Store.(store.ReadAheadWriter); ok {
				cfg.Store = aheadFault{f}
			} else {
				cfg.Store = localFault{f}
			}
		})
		syncQuiet(t, e.client("alice", sspclient.Options{}))
		epoch := e.partitionState().LogEpoch
		base := e.partitionState().MaxCommitSeq
		var commits []*wire.PushCommit
		for i := 1; i <= 5; i++ {
			commits = append(commits, &wire.PushCommit{ClientCommitID: fmt.Sprintf("c%d", i),
				Operations: []wire.Operation{e.upsertOp(t, taskRow(fmt.Sprintf("t%d", i), "p1", "x"))}})
		}
		req := &wire.Request{Version: 3, Header: &wire.ReqHeader{ClientID: "outbox-device", SchemaVersion: 1, LogEpoch: &epoch},
			Commits: commits}
		failing := "c3"
		f.failID.Store(&failing)
		r := e.post(t, body(encodeRequest(t, req)), nil)
		if r.status == http.StatusOK {
			m := decodeResponse(t, r)
			for _, pr := range pushResults(m) {
				if pr.ClientCommitID >= "c3" {
					t.Fatalf("the failing request answered %s %s", pr.ClientCommitID, pr.Status)
				}
			}
		}
		if p := e.partitionState(); p.MaxCommitSeq != base+2 {
			t.Fatalf("after the failure MaxCommitSeq is %d, want %d: c1 and c2 applied, c3 failed, c4 and c5 not attempted",
				p.MaxCommitSeq, base+2)
		}
		ctx := context.Background()
		for i, id := range []string{"c1", "c2", "c3", "c4"} {
			_, err := e.store.PushResult(ctx, e2ePartition, "outbox-device", id)
			if (err == nil) != (i < 2) {
				t.Fatalf("journal entry of %s: %v", id, err)
			}
		}
		f.failID.Store(nil)
		got := pushResults(decodeResponse(t, e.post(t, body(encodeRequest(t, req)), nil)))
		if len(got) != 5 {
			t.Fatalf("retry: %d PUSH_RESULTs, want 5", len(got))
		}
		for i, pr := range got {
			status := wire.PushApplied
			if i < 2 {
				status = wire.PushCached
			}
			if pr.Status != status || pr.CommitSeq != base+int64(i)+1 {
				t.Fatalf("retry: %s is %s seq %d, want %s seq %d", pr.ClientCommitID, pr.Status, pr.CommitSeq, status, base+int64(i)+1)
			}
		}
	})
}

// A request of more commits than one Write takes (maxGroupedCommits, 64)
// is applied in runs, in order: a delete of an absent row first in a run
// is applied at the position the run before reached, and the sequences
// stay dense across the runs. Fails when a run boundary loses a commit,
// reorders them, or the request takes one Write per commit.
func TestE2EPushGroupedRuns(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d)
		syncQuiet(t, e.client("alice", sspclient.Options{}))
		epoch := e.partitionState().LogEpoch
		seq := e.partitionState().MaxCommitSeq
		var commits []*wire.PushCommit
		var seqs []int64
		for i := range 150 {
			op := e.upsertOp(t, taskRow(fmt.Sprintf("r%03d", i), "p1", "x"))
			if i%64 == 0 && i > 0 {
				op = wire.Operation{Table: "tasks", RowID: "absent", Op: wire.OpDelete}
			} else {
				seq++
			}
			commits = append(commits, &wire.PushCommit{ClientCommitID: fmt.Sprintf("c%03d", i), Operations: []wire.Operation{op}})
			seqs = append(seqs, seq)
		}
		req := &wire.Request{Version: 3, Header: &wire.ReqHeader{ClientID: "outbox-device", SchemaVersion: 1, LogEpoch: &epoch},
			Commits: commits}
		before := storeWrites(t, e.store)
		got := pushResults(decodeResponse(t, e.post(t, body(encodeRequest(t, req)), nil)))
		if n := storeWrites(t, e.store) - before; n < 3 || n > 12 {
			t.Fatalf("150 commits took %d store writes; want 3 runs (and a few of the store's own)", n)
		}
		if len(got) != len(commits) {
			t.Fatalf("%d PUSH_RESULTs, want %d", len(got), len(commits))
		}
		for i, pr := range got {
			if pr.ClientCommitID != commits[i].ClientCommitID || pr.Status != wire.PushApplied || pr.CommitSeq != seqs[i] {
				t.Fatalf("result %d: %s %s seq %d, want %s applied seq %d", i, pr.ClientCommitID, pr.Status, pr.CommitSeq,
					commits[i].ClientCommitID, seqs[i])
			}
		}
		if p := e.partitionState(); p.MaxCommitSeq != seq {
			t.Fatalf("MaxCommitSeq %d, want %d", p.MaxCommitSeq, seq)
		}
	})
}
