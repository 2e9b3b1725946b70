package sqlitestore

import (
	"context"
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/store/storetest"
)

// TestRequestStateShared: concurrent request state reads of one partition,
// answered by shared reads (entry_share.go), get what each read alone
// gets (storetest.CheckSharedEntries).
func TestRequestStateShared(t *testing.T) {
	s := openTest(t).(testStore)
	sc := storetest.FixtureSchema(t)
	if err := s.EnsureSchema(t.Context(), sc); err != nil {
		t.Fatal(err)
	}
	storetest.CheckSharedEntries(t, s, sc.Version(), func(ctx context.Context, p, id string) (store.RequestState, error) {
		return s.readRequestState(ctx, p, id, sc.Version())
	}, s.sharedEntries.Load)
}
