package sqlitestore

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/store/storetest"
	"github.com/syncgo/syncgo/wire"
)

// TestPlanSchema: PlanSchema reports what EnsureSchemaWith then does, for
// every action, and writes nothing itself.
func TestPlanSchema(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "sync.db")
	s := openPath(t, path)
	v1, v2 := itemsSchema(t, 1, true, false), itemsSchema(t, 2, true, true)
	plan := func(sc *schema.Compiled, decls []store.CheckpointDeclaration) store.SchemaPlan {
		t.Helper()
		p, err := s.PlanSchema(ctx, sc, decls)
		if err != nil {
			t.Fatalf("PlanSchema(v%d): %v", sc.Version(), err)
		}
		return p
	}

	if p := plan(v1, nil); p.Action != store.SchemaCreate || p.Refusal != nil || len(p.Upgrade) != 0 {
		t.Errorf("fresh database: %+v, want create", p)
	}
	if got := queryInt(t, s.Store, `SELECT count(*) FROM sqlite_master WHERE name IN ('sync_schema_meta', 'items')`); got != 0 {
		t.Fatalf("PlanSchema created %d tables", got)
	}
	if err := s.EnsureSchema(ctx, v1); err != nil {
		t.Fatal(err)
	}
	if p := plan(v1, nil); p.Action != store.SchemaNone {
		t.Errorf("same version: %+v, want none", p)
	}
	if p := plan(v2, nil); p.Action != store.SchemaMigrate {
		t.Errorf("older marker: %+v, want migrate", p)
	}
	bad, err := schema.New(2).Table("items", "id", schema.String("id"), schema.String("p"), schema.Integer("title").Null()).Scope("p:{p}").Compile()
	if err != nil {
		t.Fatal(err)
	}
	p := plan(bad, nil)
	if p.Action != store.SchemaRefuse || store.ErrorCode(p.Refusal) != store.CodeSchemaMigrationPending {
		t.Errorf("non-appending bump: %+v", p)
	}
	if err := s.EnsureSchema(ctx, bad); store.ErrorCode(err) != store.ErrorCode(p.Refusal) {
		t.Errorf("EnsureSchema of the non-appending bump = %v, plan said %v", err, p.Refusal)
	}
	// A checkpoint at v2 declared by another process.
	if _, err := s.DeclareCheckpoint(ctx, store.CheckpointDeclaration{Partition: "p", Name: "proj", SchemaVersion: 2}, 1); err != nil {
		t.Fatal(err)
	}
	if p := plan(v2, nil); p.Action != store.SchemaRefuse || store.ErrorCode(p.Refusal) != store.CodeCheckpointIncomplete {
		t.Errorf("undeclared incomplete checkpoint: %+v", p)
	}
	decls := []store.CheckpointDeclaration{{Partition: "p", Name: "proj", SchemaVersion: 2}}
	if p := plan(v2, decls); p.Action != store.SchemaMigrate {
		t.Errorf("declared checkpoint: %+v, want migrate", p)
	}
	if got := queryInt(t, s.Store, `SELECT schema_version FROM sync_schema_meta`); got != 1 {
		t.Errorf("marker after the plans = %d, want 1", got)
	}
	if err := s.EnsureSchemaWith(ctx, v2, decls); err != nil {
		t.Fatal(err)
	}
	if p := plan(v2, decls); p.Action != store.SchemaNone {
		t.Errorf("after the bump: %+v, want none", p)
	}
	if p := plan(v1, nil); p.Action != store.SchemaRefuse || !errors.Is(p.Refusal, store.ErrSchemaNewer) {
		t.Errorf("newer marker: %+v, want a refusal with ErrSchemaNewer", p)
	}
	if lines, err := s.Upgrade(ctx, v1); !errors.Is(err, store.ErrSchemaNewer) {
		t.Errorf("Upgrade against a newer marker = %v, %v; want ErrSchemaNewer", lines, err)
	}
}

// TestBackfillWithoutEnsureSchema: `syncgo backfill` opens the store
// without EnsureSchema; every operation of the backfill (claim, source
// coverage, reading the source log, advancing inside a Write, activation)
// works on such a store, since they touch only core tables, while rows
// and appends still need the schema.
func TestBackfillWithoutEnsureSchema(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "sync.db")
	v1 := itemsSchema(t, 1, true, false)
	server := openPath(t, path)
	if err := server.EnsureSchema(ctx, v1); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c"} {
		storetest.ApplyUpsert(t, server, "p", storetest.NewRowWrite(t, v1, "items", []wire.Value{{Str: id}, {Str: "p"}, {Null: true}}, 1))
	}
	if _, err := server.DeclareCheckpoint(ctx, store.CheckpointDeclaration{Partition: "p", Name: "proj", SchemaVersion: 1}, 1); err != nil {
		t.Fatal(err)
	}

	op := openPath(t, path) // the operator command's store: no EnsureSchema
	cp, err := op.ClaimCheckpoint(ctx, "p", "proj", 2)
	if err != nil || cp.State != store.CheckpointBackfilling || cp.OwnerEpoch != 1 {
		t.Fatalf("claim = %+v, %v", cp, err)
	}
	target, err := op.SourceCoverageSeq(ctx, "p", []string{"items"})
	if err != nil || target != 3 {
		t.Fatalf("source coverage = %d, %v; want 3", target, err)
	}
	commits, err := op.ReadCommits(ctx, "p", 0, target, 500)
	if err != nil || len(commits) != 3 {
		t.Fatalf("source commits = %v, %v", commits, err)
	}
	err = op.Write(ctx, "p", func(ctx context.Context, tx store.WriteTx) error {
		ok, err := tx.(store.BarrierTx).AdvanceCheckpoint(ctx, "proj", cp.OwnerEpoch, target, 3, 3)
		if err == nil && !ok {
			err = errors.New("advance refused")
		}
		return err
	})
	if err != nil {
		t.Fatalf("advance in a Write: %v", err)
	}
	act, err := op.ActivateCheckpoint(ctx, "p", "proj", cp.OwnerEpoch, target, []string{"items"}, 4)
	if err != nil || act != store.Activated {
		t.Fatalf("activate = %v, %v", act, err)
	}
	cps, err := server.ReadCheckpoints(ctx, "p")
	if err != nil || len(cps) != 1 || cps[0].State != store.CheckpointActivated || cps[0].Watermark != 3 || cps[0].ObservedRows != 3 {
		t.Errorf("checkpoints after the backfill = %+v, %v", cps, err)
	}
	// What needs the schema still says so.
	err = op.Write(ctx, "p", func(ctx context.Context, tx store.WriteTx) error {
		_, err := tx.AppendCommit(ctx, store.NewCommit{ClientID: "c", ClientCommitID: "x", ActorID: "a"})
		return err
	})
	if !errors.Is(err, store.ErrNoSchema) {
		t.Errorf("append without a schema = %v, want ErrNoSchema", err)
	}
}

// TestReadOnly: a read-only store never creates a file, reads a WAL
// database a running store is writing, plans without writing, refuses
// writes, and leaves a database it cannot use as it is.
func TestReadOnly(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	openRO := func(t *testing.T, path string) *Store {
		t.Helper()
		s, err := Open(ctx, Config{Path: path, ReadOnly: true})
		if err != nil {
			t.Fatalf("read-only open: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}

	t.Run("missing file", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "none.db")
		if s, err := Open(ctx, Config{Path: path, ReadOnly: true}); !errors.Is(err, fs.ErrNotExist) {
			if s != nil {
				s.Close()
			}
			t.Errorf("read-only open of a missing file = %v, want ErrNotExist", err)
		}
		if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the read-only open created the file: %v", err)
		}
		if _, err := Open(ctx, Config{Path: MemoryPath, ReadOnly: true}); err == nil {
			t.Error("read-only open of a throw-away database succeeded")
		}
	})

	t.Run("live WAL database", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "sync.db")
		v1, v2 := itemsSchema(t, 1, true, false), itemsSchema(t, 2, true, true)
		server := openPath(t, path)
		if err := server.EnsureSchema(ctx, v1); err != nil {
			t.Fatal(err)
		}
		storetest.ApplyUpsert(t, server, "p", storetest.NewRowWrite(t, v1, "items", []wire.Value{{Str: "a"}, {Str: "p"}, {Null: true}}, 1))
		ro := openRO(t, path)
		if p, err := ro.PlanSchema(ctx, v1, nil); err != nil || p.Action != store.SchemaNone || len(p.Upgrade) != 0 {
			t.Errorf("PlanSchema = %+v, %v; want none", p, err)
		}
		if err := ro.EnsureSchema(ctx, v1); err != nil {
			t.Fatalf("EnsureSchema at the database's version: %v", err)
		}
		storetest.ApplyUpsert(t, server, "p", storetest.NewRowWrite(t, v1, "items", []wire.Value{{Str: "b"}, {Str: "p"}, {Null: true}}, 1))
		rows, err := ro.ListRows(ctx, "p", "items", nil, 10)
		if err != nil || len(rows) != 2 {
			t.Errorf("rows read beside the running store = %v, %v; want 2", rows, err)
		}
		if _, err := ro.TouchPartition(ctx, "p", 1, "e"); !errors.Is(err, ErrReadOnly) {
			t.Errorf("TouchPartition = %v, want ErrReadOnly", err)
		}
		err = ro.Write(ctx, "p", func(context.Context, store.WriteTx) error { return nil })
		if !errors.Is(err, ErrReadOnly) {
			t.Errorf("Write = %v, want ErrReadOnly", err)
		}
		if p, err := ro.PlanSchema(ctx, v2, nil); err != nil || p.Action != store.SchemaMigrate {
			t.Errorf("PlanSchema(v2) = %+v, %v; want migrate", p, err)
		}
		if err := ro.EnsureSchema(ctx, v2); !errors.Is(err, ErrReadOnly) {
			t.Errorf("EnsureSchema(v2) = %v, want ErrReadOnly", err)
		}
		if m, err := server.Marker(ctx); err != nil || m.SchemaVersion != 1 {
			t.Errorf("marker = %+v, %v; want 1", m, err)
		}
	})

	t.Run("closed WAL database", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "sync.db")
		v1 := itemsSchema(t, 1, true, false)
		server := openPath(t, path)
		if err := server.EnsureSchema(ctx, v1); err != nil {
			t.Fatal(err)
		}
		storetest.ApplyUpsert(t, server, "p", storetest.NewRowWrite(t, v1, "items", []wire.Value{{Str: "a"}, {Str: "p"}, {Null: true}}, 1))
		server.Close()
		if _, err := os.Stat(path + "-wal"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("a closed store left its WAL: %v", err)
		}
		before := fileState(t, path)
		ro := openRO(t, path)
		if err := ro.EnsureSchema(ctx, v1); err != nil {
			t.Fatal(err)
		}
		if _, err := ro.Row(ctx, "p", "items", "a"); err != nil {
			t.Errorf("row of a closed WAL database: %v", err)
		}
		ro.Close()
		// SQLite gives a read-only connection to a WAL database the -wal
		// and -shm files it needs, empty; the database itself is not
		// written.
		if after, err := os.ReadFile(path); err != nil || !bytes.Equal(after, before) {
			t.Errorf("the read-only store changed the database file (%v)", err)
		}
		if wal, err := os.ReadFile(path + "-wal"); err == nil && len(wal) != 0 {
			t.Errorf("the read-only store wrote %d bytes of WAL", len(wal))
		}
	})

	t.Run("reference database", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "sync.db")
		ref := openRaw(t, path)
		ref.script(legacyCore + legacyItems)
		ref.close()
		before := fileState(t, path)
		ro := openRO(t, path)
		p, err := ro.PlanSchema(ctx, legacySchema(t), nil)
		if err != nil || p.Action != store.SchemaUpgradeNeeded {
			t.Fatalf("PlanSchema = %+v, %v; want upgrade_needed", p, err)
		}
		for _, line := range []string{"add column sync_commits.writer_version", "create table sync_tombstones",
			"create trigger sync_commits_writer_fence", "add column items._sync_column_versions"} {
			if !slices.Contains(p.Upgrade, line) {
				t.Errorf("plan lacks %q: %v", line, p.Upgrade)
			}
		}
		// What `syncgo schema` reports besides the plan.
		if g, err := ro.ReadServeGate(ctx, "p1", 1); err != nil || g.StoredSchemaVersion != 1 || g.WriterFence != 0 || len(g.Pending) != 0 {
			t.Errorf("serve gate = %+v, %v; want version 1, no fence, nothing pending", g, err)
		}
		if cps, err := ro.ReadCheckpoints(ctx, "p1"); err != nil || len(cps) != 0 {
			t.Errorf("checkpoints = %v, %v; want none", cps, err)
		}
		if _, err := ro.Upgrade(ctx, legacySchema(t)); !errors.Is(err, ErrReadOnly) {
			t.Errorf("Upgrade = %v, want ErrReadOnly", err)
		}
		ro.Close()
		if !bytes.Equal(fileState(t, path), before) {
			t.Error("the read-only store changed the database")
		}
		if _, err := os.Stat(path + "-wal"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the read-only store left a WAL: %v", err)
		}
	})
}
