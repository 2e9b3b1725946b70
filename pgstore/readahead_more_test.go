package pgstore

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/syncgo/syncgo/store"
)

// A Write that applies several commits of one client (a request's
// commits, grouped by the engine) names their journal entries in
// WriteReads.MoreCommitIDs: all of them are read in the transaction's
// first round trip, so the function's PushResult calls for the later
// commits, present or absent, need none. Fails when MoreCommitIDs is not
// read ahead (each later lookup is a round trip of its own).
func TestWriteReadAheadMoreCommitIDs(t *testing.T) {
	ctx := context.Background()
	s := fixtureStore(t, Config{})
	seq, _, err := enginePush(ctx, s, "p", "c1", fixtureTask(t, "r1", "p", "one"))
	if err != nil || seq != 1 {
		t.Fatalf("seed push: %d, %v", seq, err)
	}
	ids := []string{"c0", "c1", "c2", "c3"}
	reads := store.WriteReads{ClientID: "client", ClientCommitID: ids[0], MoreCommitIDs: ids[1:]}
	var trips int64
	err = s.WriteReadAhead(ctx, "p", reads, func(ctx context.Context, tx store.WriteTx) error {
		if _, err := tx.(store.BarrierTx).ServeGate(ctx, 1); err != nil { // the first round trip
			return err
		}
		before := s.roundTrips.Load()
		for _, id := range ids {
			rec, err := tx.PushResult(ctx, "client", id)
			switch {
			case id == "c1" && (err != nil || rec.CommitSeq != 1):
				return fmt.Errorf("journal of c1: %+v, %v; want commit 1", rec, err)
			case id != "c1" && !errors.Is(err, store.ErrNotFound):
				return fmt.Errorf("journal of %s: %v; want not found", id, err)
			}
		}
		trips = s.roundTrips.Load() - before
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if trips != 0 {
		t.Fatalf("the journal lookups of the later commits took %d round trips; want 0 (read ahead)", trips)
	}
}
