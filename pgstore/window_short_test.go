package pgstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/store/storetest"
	"github.com/syncgo/syncgo/wire"
)

// TestWindowShortEqualsPaged: a window over a short range of the log, read
// in one round trip without the candidate walk (readShortWindow), answers
// exactly what the paged reads answer (candidates, then range or probe
// reads) for every range of a log that holds commits of several scopes,
// commits whose changes are in two scopes, a delete, another partition's
// commits, scopes in the reference's JSON-string form and a pruned commit:
// the same commits with the same changes and the same completeness; it
// always reads the partition and serve gate after them (the paged reads
// skip them when no commit is a candidate). A short read that reaches its
// row limit leaves the window to the paged reads.
func TestWindowShortEqualsPaged(t *testing.T) {
	s := openStore(t)
	c := testSchema(t, 1)
	ensure(t, s, c)
	ctx := context.Background()
	const p = "p1"
	through, queries := mixedWindowLog(t, s, c)
	// With a row limit of 2, a read of more changes is cut and the
	// paged reads answer it.
	s.shortRows = 2
	if _, err := s.readOneShort(ctx, p, "tasks", store.CommitWindowQuery{Table: "tasks", Scopes: queries[0],
		AfterSeq: 0, ThroughSeq: through}); !errors.Is(err, errShortWindowCut) {
		t.Fatalf("a short read of more changes than its row limit: %v; want errShortWindowCut", err)
	}
	shortReads := 0
	for _, rows := range []int64{shortWindowRows, 2} {
		s.shortRows = rows
		for _, sc := range queries {
			for after := int64(0); after < through; after += 3 {
				for _, hi := range []int64{after + 1, after + 5, through} {
					for _, limit := range []int{0, 1, 2, 3} {
						q := store.CommitWindowQuery{Table: "tasks", Scopes: sc, AfterSeq: after, ThroughSeq: min(hi, through),
							LimitChanges: limit, StateAfter: true, Running: 1}
						s.shortWindow = shortWindowCommits
						short, err := s.ReadCommitWindow(ctx, p, q)
						if err != nil {
							t.Fatal(err)
						}
						s.shortWindow = 0
						paged, err := s.ReadCommitWindow(ctx, p, q)
						if err != nil {
							t.Fatal(err)
						}
						// The short read always reads the state after its rows
						// (the paged reads do not when no commit is a candidate).
						if short.State == nil {
							t.Fatalf("%v: no state after the window", q)
						}
						if short.State.Partition.MaxCommitSeq != through || short.State.Gate.StoredSchemaVersion != 1 ||
							paged.State != nil && (short.State.Partition != paged.State.Partition ||
								short.State.Gate.StoredSchemaVersion != paged.State.Gate.StoredSchemaVersion) {
							t.Errorf("%v: state %+v, paged %+v", q, *short.State, *paged.State)
						}
						if short.Complete != paged.Complete || !storetest.SameCommits(short.Commits, paged.Commits) {
							t.Errorf("%v: short %s (complete %v), paged %s (complete %v)", q,
								storetest.CommitsString(short.Commits), short.Complete, storetest.CommitsString(paged.Commits), paged.Complete)
						}
						shortReads++
					}
				}
			}
		}
	}
	if shortReads < 1000 {
		t.Fatalf("%d comparisons", shortReads)
	}
}

// TestWindowSharedEqualsAlone: short window reads asked at the same time,
// answered by shared reads of their ranges' union for the union of their
// first key's values (window_share.go), get what each read alone gets: the
// commits of its own range with only the changes of its own scopes (one
// of them has a second key), cut at its own change limit, the same
// completeness and the state after. Reads of another first key share
// apart.
func TestWindowSharedEqualsAlone(t *testing.T) {
	s := openStore(t)
	c := testSchema(t, 1)
	ensure(t, s, c)
	ctx := context.Background()
	const p = "p1"
	through, scopes := mixedWindowLog(t, s, c)
	asks := storetest.WindowAsks(t, "tasks", []wire.ScopeMap{scopes[0], scopes[1], scopes[3], scopes[4]}, through, 2, 1,
		func(q store.CommitWindowQuery) (store.CommitWindow, error) { return s.readOneShort(ctx, p, "tasks", q) })
	storetest.CheckSharedWindows(t, asks, func(ctx context.Context, q store.CommitWindowQuery) (store.CommitWindow, error) {
		return s.ReadCommitWindow(ctx, p, q)
	}, s.sharedAnswers.Load)
	if n := queuesLeft(s.shares.Pending); n != 0 {
		t.Errorf("%d share queues left after the reads", n)
	}
}

// queuesLeft is how many queues of shared reads remain once their readers
// have had time to end: a reader removes its queue after it delivered the
// last answer, so a test that has every answer may still see it for a
// moment. It polls pending for up to five seconds.
func queuesLeft(pending func() int) int {
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := pending()
		if n == 0 || time.Now().After(deadline) {
			return n
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// mixedWindowLog writes partition p1's log for the window tests: commits
// of three projects and two owners, some with a second change in another
// scope, a delete, commits of partition p2 in between, every third
// commit's scopes in the JSON-string form, one commit pruned. It returns
// the last sequence and the scopes to read.
func mixedWindowLog(t *testing.T, s *Store, c *schema.Compiled) (int64, []wire.ScopeMap) {
	t.Helper()
	ctx := context.Background()
	const p = "p1"
	var seqs []int64
	for i := range 24 {
		project, owner := []string{"a", "b", "c"}[i%3], []string{"o1", "o2"}[i%2]
		id := fmt.Sprintf("r%d", i)
		ws := []store.RowWrite{task{id: id, project: project, owner: owner, title: ptr("t" + id)}.write(t, c, 1)}
		if i%4 == 1 {
			// A second change in another scope.
			ws = append(ws, task{id: id + "x", project: "b", owner: "o1"}.write(t, c, 1))
		}
		seqs = append(seqs, apply(t, s, p, ws...))
		if i%5 == 2 {
			apply(t, s, "p2", task{id: id, project: project, owner: owner}.write(t, c, 1))
		}
	}
	del := task{id: "r3", project: "a", owner: "o2"}.write(t, c, 2)
	err := s.Write(ctx, p, func(ctx context.Context, tx store.WriteTx) error {
		seq, err := tx.AppendCommit(ctx, store.NewCommit{ClientID: "c2", ClientCommitID: "del", ActorID: "a2", CreatedAtMs: 2000,
			Changes: []store.Change{{Table: "tasks", RowID: "r3", Op: wire.OpDelete, Scopes: del.Scopes}}})
		seqs = append(seqs, seq)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		`UPDATE sync_changes SET scopes = to_jsonb(scopes::text) WHERE commit_seq % 3 = 0`,
		`DELETE FROM sync_commits WHERE partition = 'p1' AND commit_seq = ` + fmt.Sprint(seqs[7]),
	} {
		if _, err := s.pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	return seqs[len(seqs)-1], []wire.ScopeMap{
		scope("project_id", "a"),
		scope("project_id", "b"),
		scope("project_id", "a", "c"),
		{{Key: "project_id", Values: []string{"a", "b"}}, {Key: "owner_id", Values: []string{"o1"}}},
		scope("owner_id", "o2"),
		scope("project_id", "zz"),
	}
}
