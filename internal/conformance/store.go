package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// backing is what an instance's database offers, on either driver
// (sqlitestore.Store and pgstore.Store).
type backing interface {
	store.Store
	store.LeaseStore
	store.BlobRefIndex
	SegmentStore() store.SegmentStore
	BlobStore() store.BlobStore
}

// current holds the database an instanceStore forwards to.
type current struct{ b backing }

// instanceStore is the store an instance's server runs on: it forwards to
// the current database, which restoreBackup replaces, and injects the
// idempotency fault.
type instanceStore struct {
	cur atomic.Pointer[current]
	// failPushResult makes the next PushResult lookup find an unreadable
	// record (failNextIdempotencyLookup).
	failPushResult atomic.Bool

	mu      sync.Mutex
	retired []backing // replaced by a restore; closed with the instance
}

var _ store.Store = (*instanceStore)(nil)

func newInstanceStore(st backing) *instanceStore {
	s := &instanceStore{}
	s.cur.Store(&current{st})
	return s
}

func (s *instanceStore) current() backing { return s.cur.Load().b }

// swap makes st the current database. The replaced one stays open, so
// that a request still running on it finishes, until closeAll.
func (s *instanceStore) swap(st backing) {
	old := s.cur.Swap(&current{st})
	s.mu.Lock()
	s.retired = append(s.retired, old.b)
	s.mu.Unlock()
}

func (s *instanceStore) closeAll() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	errs := []error{s.current().Close()}
	for _, st := range s.retired {
		errs = append(errs, st.Close())
	}
	s.retired = nil
	return errors.Join(errs...)
}

// PushResult implements store.Store, failing once as an unreadable record
// when the fault is armed.
func (s *instanceStore) PushResult(ctx context.Context, partition, clientID, clientCommitID string) (store.PushRecord, error) {
	if s.failPushResult.CompareAndSwap(true, false) {
		return store.PushRecord{}, fmt.Errorf("conformance: injected fault: %w", store.ErrUnreadable)
	}
	return s.current().PushResult(ctx, partition, clientID, clientCommitID)
}

// The remaining methods forward to the current database.

func (s *instanceStore) EnsureSchema(ctx context.Context, sc *schema.Compiled) error {
	return s.current().EnsureSchema(ctx, sc)
}

func (s *instanceStore) Marker(ctx context.Context) (store.Marker, error) {
	return s.current().Marker(ctx)
}

func (s *instanceStore) TouchPartition(ctx context.Context, partition string, nowMs int64, newEpoch string) (store.Partition, error) {
	return s.current().TouchPartition(ctx, partition, nowMs, newEpoch)
}

func (s *instanceStore) Partition(ctx context.Context, partition string) (store.Partition, error) {
	return s.current().Partition(ctx, partition)
}

func (s *instanceStore) RotateLogEpoch(ctx context.Context, partition, newEpoch string, nowMs int64) error {
	return s.current().RotateLogEpoch(ctx, partition, newEpoch, nowMs)
}

func (s *instanceStore) Write(ctx context.Context, partition string, fn func(ctx context.Context, tx store.WriteTx) error) error {
	return s.current().Write(ctx, partition, fn)
}

func (s *instanceStore) Row(ctx context.Context, partition, table, rowID string) (store.Row, error) {
	return s.current().Row(ctx, partition, table, rowID)
}

func (s *instanceStore) ReadCommitWindow(ctx context.Context, partition string, q store.CommitWindowQuery) (store.CommitWindow, error) {
	return s.current().ReadCommitWindow(ctx, partition, q)
}

func (s *instanceStore) ScanRows(ctx context.Context, partition string, q store.RowScanQuery) ([]store.Row, error) {
	return s.current().ScanRows(ctx, partition, q)
}

func (s *instanceStore) PageBoundaries(ctx context.Context, partition string, q store.RowScanQuery, pages int) ([]string, error) {
	return s.current().PageBoundaries(ctx, partition, q, pages)
}

func (s *instanceStore) ListRows(ctx context.Context, partition, table string, after *string, limit int) ([]store.Row, error) {
	return s.current().ListRows(ctx, partition, table, after, limit)
}

func (s *instanceStore) ReadCommits(ctx context.Context, partition string, after, through int64, limit int) ([]store.Commit, error) {
	return s.current().ReadCommits(ctx, partition, after, through, limit)
}

func (s *instanceStore) LatestScopedChangeSeq(ctx context.Context, partition, table string, scope wire.ScopeValues) (int64, error) {
	return s.current().LatestScopedChangeSeq(ctx, partition, table, scope)
}

func (s *instanceStore) Client(ctx context.Context, partition, clientID string) (store.ClientRecord, error) {
	return s.current().Client(ctx, partition, clientID)
}

func (s *instanceStore) PutClient(ctx context.Context, partition string, rec store.ClientRecord) error {
	return s.current().PutClient(ctx, partition, rec)
}

func (s *instanceStore) BindClient(ctx context.Context, partition string, rec store.ClientRecord) (store.ClientRecord, error) {
	return s.current().BindClient(ctx, partition, rec)
}

func (s *instanceStore) AdvanceClientCursor(ctx context.Context, partition string, a store.CursorAdvance) (bool, error) {
	return s.current().AdvanceClientCursor(ctx, partition, a)
}

func (s *instanceStore) ActiveCursorFloor(ctx context.Context, partition string, sinceMs int64) (int64, bool, error) {
	return s.current().ActiveCursorFloor(ctx, partition, sinceMs)
}

func (s *instanceStore) CommitSeqBefore(ctx context.Context, partition string, beforeMs int64) (int64, error) {
	return s.current().CommitSeqBefore(ctx, partition, beforeMs)
}

func (s *instanceStore) PruneThrough(ctx context.Context, partition, logEpoch string, throughSeq int64) (store.PruneResult, error) {
	return s.current().PruneThrough(ctx, partition, logEpoch, throughSeq)
}

func (s *instanceStore) Stats() store.Stats { return s.current().Stats() }

// Close implements store.Store; the instance closes its databases itself
// (closeAll), so the server's owner-closes-store contract is kept.
func (s *instanceStore) Close() error { return s.closeAll() }

var _ store.LeaseStore = (*instanceStore)(nil)

// IssueLease implements store.LeaseStore on the current database.
func (s *instanceStore) IssueLease(ctx context.Context, partition, clientID string, l store.Lease) (store.Lease, error) {
	return s.current().IssueLease(ctx, partition, clientID, l)
}

// LoadLease implements store.LeaseStore on the current database.
func (s *instanceStore) LoadLease(ctx context.Context, partition, clientID string) (store.Lease, error) {
	return s.current().LoadLease(ctx, partition, clientID)
}

// RevokeLease implements store.LeaseStore on the current database.
func (s *instanceStore) RevokeLease(ctx context.Context, partition, leaseID string) error {
	return s.current().RevokeLease(ctx, partition, leaseID)
}
