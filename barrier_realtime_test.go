package syncgo_test

import (
	"context"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/pgstore"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// A process whose serve gate closed (a newer process migrated the shared
// database) must not fan the newer process's commits out to its realtime
// sockets as deltas: their rows have the newer layout, which the sockets'
// clients, served the older one, cannot read. The commit reaches them as a
// wake-up; their pull is then refused with sync.schema_not_ready.
func TestMigrationBarrierRealtimeFanoutAfterBump(t *testing.T) {
	db := pgtest.Schema(t, "syncgo_barrier_rt", false)
	t.Parallel()
	open := func() store.Store {
		st, err := pgstore.Open(context.Background(), pgstore.Config{URL: db, MaxConns: 4})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	v1 := rtSchema(t)
	v2, err := schema.New(2).
		Table("tasks", "id", schema.String("id"), schema.String("project_id"), schema.String("title"),
			schema.Boolean("done"), schema.Integer("rank").Null(), schema.String("notes").Null(),
			schema.Integer("priority").Null()).
		Scope("project:{project_id}").
		Compile()
	if err != nil {
		t.Fatal(err)
	}

	// The old process, with a socket subscribed to p1.
	old := &rtEnv{t: t, store: open(), schema: v1, gates: map[string]chan struct{}{}}
	old.start(syncgo.Config{Store: old.store, Schema: v1, Authenticate: rtAuth, ResolveScopes: old.resolve, RetentionInterval: -1})
	reader := old.peer("alice", "c1")
	reader.pull(rtSub("s", -1, "p1"))
	sock := old.dial("alice", "c1")
	sock.hello()

	// Its listener is up: a commit another v1 store appends reaches the
	// socket as a delta.
	other := open()
	if err := other.EnsureSchema(context.Background(), v1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(rtWait)
	for {
		if time.Now().After(deadline) {
			t.Fatal("the old process's listener never delivered a commit")
		}
		appendTask(t, other, v1, "warm", nil)
		if m, ok := sock.tryNext(500 * time.Millisecond); ok {
			rtDecodeDelta(t, "c1", m)
			break
		}
	}
	for { // drain further warm-up deltas
		if _, ok := sock.tryNext(300 * time.Millisecond); !ok {
			break
		}
	}

	// A version-2 process migrates the database and appends a row of the
	// new layout.
	newer := open()
	if err := newer.EnsureSchema(context.Background(), v2); err != nil {
		t.Fatal(err)
	}
	appendTask(t, newer, v2, "t2", &wire.Value{Int: 9})

	m := sock.next(rtWait)
	if m.op == ws.OpBinary && len(m.data) > 0 && m.data[0] == wire.ChannelTagDelta {
		d := rtDecodeDelta(t, "c1", m)
		var decodeErr error
		for _, f := range d.Frames {
			if c, ok := f.(*wire.Commit); ok && len(c.Changes) > 0 {
				_, decodeErr = old.taskCodec().DecodeRow(c.Changes[0].Row)
			}
		}
		t.Fatalf("the old process (schema 1, gate closed) sent a delta of a schema-2 commit: %v; its row decoded with the client's schema-1 codec: %v",
			rtFrameTypes(d), decodeErr)
	}
	if w, ok := sock.eventOf(m).(wire.Wake); !ok {
		t.Fatalf("got %v, want a wake-up", m)
	} else {
		_ = w
	}
}

// appendTask appends a commit upserting one task of project p1, encoded in
// sc's layout (extra is the value of a seventh column, when sc has one).
func appendTask(t *testing.T, st store.Store, sc *schema.Compiled, id string, extra *wire.Value) {
	t.Helper()
	tbl, _ := sc.Table("tasks")
	vals := []wire.Value{{Str: id}, {Str: "p1"}, {Str: id}, {Bool: false}, {Null: true}, {Null: true}}
	if extra != nil {
		vals = append(vals, *extra)
	}
	payload, err := tbl.RowCodec().AppendRow(nil, vals)
	if err != nil {
		t.Fatal(err)
	}
	err = st.Write(context.Background(), rtPartition, func(ctx context.Context, tx store.WriteTx) error {
		_, err := tx.AppendCommit(ctx, store.NewCommit{ClientID: "w", ClientCommitID: id + "-" + time.Now().String(), ActorID: "w",
			Changes: []store.Change{{Table: "tasks", RowID: id, Op: wire.OpUpsert, RowVersion: 1,
				Scopes: wire.StoredScopes{{Key: "project_id", Value: "p1"}}, Payload: payload}}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
