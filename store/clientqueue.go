package store

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
)

// ClientDeferrer is implemented by drivers that can defer the write of a
// client record whose only change is its cursor and update time (a pull
// round of a client that keeps its actor, wire version and subscription
// list). The engine calls it instead of Store.PutClient in that case.
type ClientDeferrer interface {
	// DeferClient queues rec for a write within a short bound. The write
	// moves the stored cursor to rec.Cursor (and the update time forward)
	// only while the stored record is still the one the caller read: the
	// same actor and wire version, the cursor baseCursor, and the
	// partition still in logEpoch. Any other write of the record in
	// between (an ack, a record written synchronously, an epoch rotation,
	// another process) wins and the deferred write is dropped. Until it
	// is written, Client in this process returns the record with the
	// deferred cursor; Close and ActiveCursorFloor write what is pending
	// first.
	DeferClient(ctx context.Context, partition, logEpoch string, rec ClientRecord, baseCursor int64) error
}

// DeferredClient is one pending deferred client write.
type DeferredClient struct {
	Partition   string
	ClientID    string
	ActorID     string
	WireVersion uint16
	LogEpoch    string
	// BaseCursor is the stored cursor the write expects; Cursor and
	// UpdatedAtMs are what it writes.
	BaseCursor  int64
	Cursor      int64
	UpdatedAtMs int64

	subs []SubscriptionRecord
	// failures counts the batches that failed to write this record.
	failures int
}

// MaxDeferredClients bounds the records a ClientWriteBehind holds: past
// it, Defer refuses a record it does not hold yet with ErrDeferFull, and
// the caller writes that record itself. Only a write that keeps failing
// (a database that refuses every batch) lets so many gather.
const MaxDeferredClients = 1 << 16

// maxDeferredFailures is how many failed batches a record is written in
// before it is dropped. A deferred write only moves a stored cursor and
// update time forward (retention's floor of active clients); one dropped
// leaves them where they were, which keeps more of the log, never less.
const maxDeferredFailures = 8

type clientKey struct{ partition, clientID string }

// ClientWriteBehind coalesces deferred client writes (the newest per
// partition and client wins) and writes them in one batch per interval
// from a goroutine of its own. Drivers use it to implement
// ClientDeferrer; the writes that must not be reordered with a pending one
// run through Sync.
type ClientWriteBehind struct {
	interval time.Duration
	write    func(ctx context.Context, batch []DeferredClient) error
	log      *slog.Logger

	// flushing is held exclusively while a batch is written and shared by
	// the synchronous writes of client records (Sync): a synchronous write
	// never runs at the same time as a batch, so the one that takes a
	// record's pending entry out is ordered after any batch that held it.
	flushing sync.RWMutex

	mu      sync.Mutex
	pending map[clientKey]*DeferredClient
	// inflight is the batch being written: the records read meanwhile
	// see it.
	inflight map[clientKey]*DeferredClient
	closed   bool

	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

// NewClientWriteBehind starts a write-behind that writes its pending
// records with write at most interval after the first of them was queued.
// write gets every pending record; a batch that fails (except for lack of
// space) is queued again unless a newer write superseded it, up to
// maxDeferredFailures times for each record, then dropped with a warning
// to log (nil discards it).
func NewClientWriteBehind(interval time.Duration, write func(ctx context.Context, batch []DeferredClient) error, log *slog.Logger) *ClientWriteBehind {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &ClientWriteBehind{interval: interval, write: write, log: log, pending: map[clientKey]*DeferredClient{},
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

func (w *ClientWriteBehind) run() {
	defer close(w.done)
	t := time.NewTimer(w.interval)
	t.Stop()
	for {
		select {
		case <-w.kick:
		case <-w.stop:
			return
		}
		t.Reset(w.interval)
		select {
		case <-t.C:
		case <-w.stop:
			t.Stop()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = w.Flush(ctx)
		cancel()
	}
}

// Defer queues a record (see ClientDeferrer.DeferClient).
func (w *ClientWriteBehind) Defer(partition, logEpoch string, rec ClientRecord, baseCursor int64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	k := clientKey{partition, rec.ClientID}
	if d, ok := w.pending[k]; ok && d.ActorID == rec.ActorID && d.WireVersion == rec.WireVersion &&
		d.LogEpoch == logEpoch && SubscriptionsEqual(d.subs, rec.Subscriptions) &&
		(baseCursor == d.BaseCursor || baseCursor == d.Cursor) {
		// The caller read the record the pending write started from, or
		// the pending write itself: keep its base, move forward only.
		d.Cursor = max(d.Cursor, rec.Cursor)
		d.UpdatedAtMs = max(d.UpdatedAtMs, rec.UpdatedAtMs)
		return nil
	}
	if len(w.pending) >= MaxDeferredClients {
		return ErrDeferFull
	}
	w.pending[k] = &DeferredClient{Partition: partition, ClientID: rec.ClientID, ActorID: rec.ActorID,
		WireVersion: rec.WireVersion, LogEpoch: logEpoch, BaseCursor: baseCursor, Cursor: rec.Cursor,
		UpdatedAtMs: rec.UpdatedAtMs, subs: rec.Subscriptions}
	select {
	case w.kick <- struct{}{}:
	default:
	}
	return nil
}

// ReadClient returns the record that read gets from the database with
// the pending write of it applied (see Read); a nil write-behind (a store
// without one) returns read's answer as it is.
func (w *ClientWriteBehind) ReadClient(partition string, read func() (ClientRecord, error)) (ClientRecord, error) {
	if w == nil {
		return read()
	}
	var rec ClientRecord
	err := w.Read(partition, &rec, func() (err error) {
		rec, err = read()
		return err
	})
	return rec, err
}

// Read runs read, which fills rec from the database, then applies the
// pending write of the record to it (Overlay), with no batch running in
// between: a batch that committed after the database read and before the
// overlay would leave rec without its write either way (read before it,
// and no longer pending or in flight after it).
func (w *ClientWriteBehind) Read(partition string, rec *ClientRecord, read func() error) error {
	if w == nil {
		return read()
	}
	w.flushing.RLock()
	defer w.flushing.RUnlock()
	if err := read(); err != nil {
		return err
	}
	w.Overlay(partition, rec)
	return nil
}

// Overlay applies a pending write of the record to rec, a record just
// read from the database, when the pending write would apply to it.
func (w *ClientWriteBehind) Overlay(partition string, rec *ClientRecord) {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := clientKey{partition, rec.ClientID}
	overlay(w.inflight[k], rec) // written, but maybe not committed yet
	overlay(w.pending[k], rec)
}

func overlay(d *DeferredClient, rec *ClientRecord) {
	if d == nil || d.ActorID != rec.ActorID || d.WireVersion != rec.WireVersion || d.BaseCursor != rec.Cursor ||
		!SubscriptionsEqual(d.subs, rec.Subscriptions) {
		return
	}
	rec.Cursor = d.Cursor
	rec.UpdatedAtMs = max(rec.UpdatedAtMs, d.UpdatedAtMs)
}

// Sync runs a synchronous write of a client record (or, with clientID "",
// of every record of the partition): the pending write of the record is
// dropped first, and no batch runs during fn.
func (w *ClientWriteBehind) Sync(partition, clientID string, fn func() error) error {
	w.flushing.RLock()
	defer w.flushing.RUnlock()
	w.mu.Lock()
	for k := range w.pending {
		if k.partition == partition && (clientID == "" || k.clientID == clientID) {
			delete(w.pending, k)
		}
	}
	w.mu.Unlock()
	return fn()
}

// SyncPartitions is Sync of every record of several partitions, in one
// fn (a rotation of their log epochs in one transaction).
func (w *ClientWriteBehind) SyncPartitions(partitions []string, fn func() error) error {
	w.flushing.RLock()
	defer w.flushing.RUnlock()
	in := make(map[string]bool, len(partitions))
	for _, p := range partitions {
		in[p] = true
	}
	w.mu.Lock()
	for k := range w.pending {
		if in[k.partition] {
			delete(w.pending, k)
		}
	}
	w.mu.Unlock()
	return fn()
}

// Advance runs a monotone cursor write (a realtime ack) that fn reports as
// having set the stored cursor to cursor (updated) or not: no batch runs
// during it, and a pending write the ack passed is dropped, while a
// pending write ahead of it now expects the ack's cursor.
func (w *ClientWriteBehind) Advance(partition, clientID string, cursor int64, fn func() (bool, error)) (bool, error) {
	w.flushing.RLock()
	defer w.flushing.RUnlock()
	updated, err := fn()
	if err != nil || !updated {
		return updated, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.advancedLocked(partition, clientID, cursor)
	return updated, nil
}

// AdvanceMany is Advance for several acks of a partition written by one
// fn, which reports which of them updated their record.
func (w *ClientWriteBehind) AdvanceMany(partition string, advances []CursorAdvance, fn func() ([]bool, error)) ([]bool, error) {
	w.flushing.RLock()
	defer w.flushing.RUnlock()
	updated, err := fn()
	if err != nil {
		return updated, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, a := range advances {
		if i < len(updated) && updated[i] {
			w.advancedLocked(partition, a.ClientID, a.Cursor)
		}
	}
	return updated, nil
}

// advancedLocked settles the pending write of a record whose stored
// cursor an ack has just set. w.mu is held.
func (w *ClientWriteBehind) advancedLocked(partition, clientID string, cursor int64) {
	k := clientKey{partition, clientID}
	if d, ok := w.pending[k]; ok {
		if d.Cursor <= cursor {
			delete(w.pending, k)
		} else {
			d.BaseCursor = cursor
		}
	}
}

// Flush writes every pending record now.
func (w *ClientWriteBehind) Flush(ctx context.Context) error {
	w.flushing.Lock()
	defer w.flushing.Unlock()
	w.mu.Lock()
	if len(w.pending) == 0 {
		w.mu.Unlock()
		return nil
	}
	batch := make([]DeferredClient, 0, len(w.pending))
	for _, d := range w.pending {
		batch = append(batch, *d)
	}
	w.inflight, w.pending = w.pending, map[clientKey]*DeferredClient{}
	w.mu.Unlock()
	// One order for every batch: two processes writing overlapping
	// batches lock the rows in the same order.
	slices.SortFunc(batch, func(a, b DeferredClient) int {
		if c := strings.Compare(a.Partition, b.Partition); c != 0 {
			return c
		}
		return strings.Compare(a.ClientID, b.ClientID)
	})
	err := w.write(ctx, batch)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.inflight = nil
	if err == nil || errors.Is(err, ErrStorageFull) {
		return err
	}
	// Queue the batch again where nothing newer was queued meanwhile.
	if w.closed {
		return err
	}
	dropped := 0
	for i := range batch {
		k := clientKey{batch[i].Partition, batch[i].ClientID}
		if _, ok := w.pending[k]; ok {
			continue
		}
		if batch[i].failures++; batch[i].failures >= maxDeferredFailures {
			dropped++
			continue
		}
		w.pending[k] = &batch[i]
	}
	if dropped > 0 {
		w.log.Warn("deferred client records dropped: their writes kept failing (their stored cursors stay behind)",
			"records", dropped, "attempts", maxDeferredFailures, "err", err)
	}
	select {
	case w.kick <- struct{}{}:
	default:
	}
	return err
}

// Pending reports how many records wait to be written.
func (w *ClientWriteBehind) Pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending)
}

// Close stops the goroutine, refuses later Defer calls and writes what is
// pending.
func (w *ClientWriteBehind) Close(ctx context.Context) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.mu.Unlock()
	close(w.stop)
	<-w.done
	return w.Flush(ctx)
}

// SubscriptionsDigest is a digest of a subscription list, in order: ids,
// tables and scopes (keys sorted, values in order), never 0. Lists that
// SubscriptionsEqual reports the same, whatever their schema versions,
// have the same digest. Every string and count is written with its length
// first: values may hold any byte, and a separator alone would give lists
// that split their values differently ("a\x02b" against "a", "b") one
// digest.
func SubscriptionsDigest(subs []SubscriptionRecord) uint64 {
	d := digest(fnvOffset64)
	var keys []string
	d.count(len(subs))
	for _, s := range subs {
		d.field(s.ID)
		d.field(s.Table)
		keys = keys[:0]
		for k := range s.Scopes {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		d.count(len(keys))
		for _, k := range keys {
			d.field(k)
			d.count(len(s.Scopes[k]))
			for _, v := range s.Scopes[k] {
				d.field(v)
			}
		}
	}
	return uint64(d) | 1
}

// digest is a 64-bit FNV-1a hash of uvarint lengths and strings.
type digest uint64

const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

func (d *digest) count(n int) {
	for u := uint64(n); ; u >>= 7 {
		b := byte(u & 0x7f)
		if u >= 0x80 {
			b |= 0x80
		}
		*d = (*d ^ digest(b)) * fnvPrime64
		if u < 0x80 {
			return
		}
	}
}

func (d *digest) field(s string) {
	d.count(len(s))
	for i := 0; i < len(s); i++ {
		*d = (*d ^ digest(s[i])) * fnvPrime64
	}
}

// StoredSubscriptionsMatch reports whether an advance applies to a record
// whose stored subscription list is stored (the encoded column): yes when
// the advance carries no digest, or the list decodes to its digest.
func StoredSubscriptionsMatch(a CursorAdvance, stored []byte, decode func([]byte) ([]SubscriptionRecord, error)) bool {
	if a.Subscriptions == 0 {
		return true
	}
	subs, err := decode(stored)
	return err == nil && SubscriptionsDigest(subs) == a.Subscriptions
}

// SubscriptionsEqual reports whether two subscription lists are the same,
// in order, with the same scope values in the same order.
func SubscriptionsEqual(a, b []SubscriptionRecord) bool {
	return slices.EqualFunc(a, b, func(x, y SubscriptionRecord) bool {
		if x.ID != y.ID || x.Table != y.Table || x.SchemaVersion != y.SchemaVersion || len(x.Scopes) != len(y.Scopes) {
			return false
		}
		for k, xv := range x.Scopes {
			yv, ok := y.Scopes[k]
			if !ok || !slices.Equal(xv, yv) {
				return false
			}
		}
		return true
	})
}
