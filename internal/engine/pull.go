package engine

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// pullLimits are the clamped PULL_HEADER limits (§4.2).
type pullLimits struct {
	commits, rows, pages int
}

func clamp(v, def, lo, hi int32) int {
	if v == 0 {
		return int(def)
	}
	return int(min(max(v, lo), hi))
}

func clampLimits(h *wire.PullHeader) pullLimits {
	return pullLimits{
		commits: clamp(h.LimitCommits, 1000, 1, 1000),
		rows:    clamp(h.LimitSnapshotRows, 1000, 1, 50000),
		pages:   clamp(h.MaxSnapshotPages, 4, 1, 50),
	}
}

// subOutcome is what a subscription section reported.
type subOutcome struct {
	active     bool
	nextCursor int64
	effective  wire.ScopeMap
}

// pull answers every subscription, in request order.
func (r *request) pull(ctx context.Context) error {
	// The partition as read at entry, not read again: every commit up to
	// the newest one this request's push answered is durable and visible
	// (sequences are taken under the partition's write boundary, in
	// order), so the pull's high-water mark is the larger of the two.
	// Pruning since entry is caught by the recheck after each window.
	p := r.partition
	p.MaxCommitSeq = max(p.MaxCommitSeq, r.lastSeq)
	lim := clampLimits(r.req.Pull)
	r.pulled = make([]subOutcome, len(r.req.Subscriptions))
	for i := 0; i < len(r.req.Subscriptions); {
		run, err := r.prefetchRun(ctx, i, p, lim)
		if err != nil {
			return err
		}
		if len(run) == 0 {
			if r.pulled[i], err = r.section(ctx, r.req.Subscriptions[i], p, lim, nil); err != nil {
				return err
			}
			i++
			continue
		}
		for j := range run {
			if r.pulled[i+j], err = r.section(ctx, r.req.Subscriptions[i+j], p, lim, &run[j]); err != nil {
				return err
			}
			run[j] = store.CommitWindow{} // encoded: its memory may go
		}
		i += len(run)
	}
	return nil
}

// maxPrefetchSections bounds the sections whose windows one read answers
// (prefetchRun): the windows of a run are held together until their
// sections are encoded.
const maxPrefetchSections = 16

// prefetchRun reads, in one go, the commit windows of the run of
// sections from subscription from on that are caught-up replays (each
// active, its cursor within the log and nothing that could reset it, so
// that it reads nothing but its window), when the store can
// (store.CommitWindowBatcher: one round trip on Postgres instead of one
// per section) and the run holds at least two, at most
// maxPrefetchSections. The state it reads after all the windows' rows is
// read after every row the response holds when each of the run's
// sections is encoded: the sections before the run read theirs before
// it. Nil when there is no such run: the section at from reads its own.
func (r *request) prefetchRun(ctx context.Context, from int, p store.Partition, lim pullLimits) ([]store.CommitWindow, error) {
	wb, ok := r.e.cfg.Store.(store.CommitWindowBatcher)
	if !ok || len(r.req.Subscriptions)-from < 2 {
		// A pull of one subscription (a round's usual case) or its last
		// section: no run, and nothing computed twice.
		return nil, nil
	}
	var qs []store.CommitWindowQuery
	for _, sub := range r.req.Subscriptions[from:] {
		eff, active := effectiveScopes(sub.Scopes, r.allowed, r.resolveOK)
		c := sub.Cursor
		if len(qs) == maxPrefetchSections || !active || sub.BootstrapState != nil || c < 0 || c < p.HorizonSeq ||
			c > p.MaxCommitSeq || r.mayResetCatchUp(sub, eff, p, lim) {
			break
		}
		qs = append(qs, r.windowQuery(sub, eff, p, lim))
	}
	if len(qs) < 2 {
		return nil, nil
	}
	return wb.ReadCommitWindows(ctx, r.auth.Partition, qs)
}

// windowQuery is the commit window a caught-up section reads. WireOnly: a
// section sends what COMMIT frames carry, never the commits' client ids.
func (r *request) windowQuery(sub *wire.Subscription, eff wire.ScopeMap, p store.Partition, lim pullLimits) store.CommitWindowQuery {
	q := store.CommitWindowQuery{Table: sub.Table, Scopes: eff, AfterSeq: sub.Cursor, ThroughSeq: p.MaxCommitSeq,
		LimitChanges: lim.commits, WireOnly: true}
	if _, ok := r.e.cfg.Store.(store.RequestStateReader); ok && r.gate != nil {
		q.StateAfter, q.Running = true, r.e.cfg.Schema.Version()
	}
	return q
}

// section answers one subscription; pre is its window when the pull read
// it ahead (prefetchRun).
func (r *request) section(ctx context.Context, sub *wire.Subscription, p store.Partition, lim pullLimits, pre *store.CommitWindow) (subOutcome, error) {
	r.gateAfterReads = nil // this section reads data after it
	eff, active := effectiveScopes(sub.Scopes, r.allowed, r.resolveOK)
	if !active {
		return subOutcome{nextCursor: sub.Cursor}, r.emptySection(sub, wire.SubRevoked, syncerr.CodeScopeRevoked)
	}
	cursor := sub.Cursor
	if sub.BootstrapState == nil && cursor >= 0 && cursor < p.HorizonSeq {
		return subOutcome{nextCursor: cursor}, r.emptySection(sub, wire.SubReset, syncerr.CodeCursorExpired)
	}
	if sub.BootstrapState != nil || cursor < 0 || cursor > p.MaxCommitSeq {
		next, err := r.bootstrap(ctx, sub, eff, p, lim)
		return subOutcome{active: true, nextCursor: next, effective: eff}, err
	}
	if sub.BootstrapState == nil {
		reset, err := r.catchUpReset(ctx, sub, eff, p, lim)
		if err != nil {
			return subOutcome{}, err
		}
		if reset {
			r.e.catchUpResets.Add(1)
			return subOutcome{nextCursor: cursor}, r.emptySection(sub, wire.SubReset, syncerr.CodeCursorExpired)
		}
	}
	q := r.windowQuery(sub, eff, p, lim)
	// A window read ahead is used only by a request whose response holds
	// nothing read before this section: its entry reads are then reads
	// after every row the response holds (readahead.go).
	catchUp := pre == nil && len(r.req.Subscriptions) == 1 && len(r.req.Commits) == 0 && r.req.Header.ClientID != ""
	key := aheadKey{partition: r.auth.Partition, actor: r.auth.ActorID, client: r.req.Header.ClientID}
	var (
		win     store.CommitWindow
		body    *preBody
		now     store.Partition
		doneAt  time.Time
		err     error
		aheadOK bool
	)
	if catchUp {
		win, body, doneAt, aheadOK = r.e.ahead.take(ctx, key, q, r.partition.LogEpoch)
	}
	switch {
	case aheadOK && doneAt.Before(r.enteredAt):
		// §4.6: the entry's partition and gate were read after the window.
		now, r.gateAfterReads = r.partition, r.gate
	case aheadOK && win.State != nil:
		// The read ahead read them after its rows (take keeps that state
		// only when it was read at this request's running version).
		now, r.gateAfterReads = win.State.Partition, &win.State.Gate
	case aheadOK:
		if now, err = r.recheck(ctx); err != nil {
			return subOutcome{}, err
		}
	default:
		if pre != nil {
			win = *pre
		} else if win, err = r.e.cfg.Store.ReadCommitWindow(ctx, r.auth.Partition, q); err != nil {
			return subOutcome{}, err
		}
		// §4.6: recheck the horizon after reading the window (read with
		// it when the store could).
		if win.State != nil {
			now, r.gateAfterReads = win.State.Partition, &win.State.Gate
		} else if now, err = r.recheck(ctx); err != nil {
			return subOutcome{}, err
		}
	}
	if now.HorizonSeq > cursor {
		return subOutcome{nextCursor: cursor}, r.emptySection(sub, wire.SubReset, syncerr.CodeCursorExpired)
	}
	next := p.MaxCommitSeq
	if !win.Complete && len(win.Commits) > 0 {
		next = win.Commits[len(win.Commits)-1].Seq
		if catchUp {
			// The client's next request will ask for the window after
			// this one: read it (and encode and compress its response,
			// precompress.go) while this one is encoded and read.
			ahead := q
			ahead.AfterSeq, ahead.Bulk = next, true
			r.e.ahead.start(r.e.cfg.Store, key, ahead, r.partition.LogEpoch, r.preSpecFor(sub.ID))
		}
	}
	next = max(next, cursor)
	if err := r.enc.Encode(&wire.SubStart{ID: sub.ID, Status: wire.SubActive, EffectiveScopes: eff}); err != nil {
		return subOutcome{}, err
	}
	if r.usable(body, next) {
		// The window's frames are the body's: the response ends with it
		// (close), after the request's SUB_END, checked against it.
		r.preBody = body
		r.e.ahead.precompressed.Add(1)
	} else {
		client, current, _ := r.tables(sub.Table)
		if err := encodeCommits(r.enc, win, sub.Table, client, current, r.old()); err != nil {
			return subOutcome{}, err
		}
	}
	// Every commit is encoded (Encode copies what it writes): the
	// window's memory may serve the store's next window.
	if win.Release != nil {
		win.Release()
	}
	return subOutcome{active: true, nextCursor: next, effective: eff}, r.enc.Encode(&wire.SubEnd{NextCursor: next})
}

// emptySection writes a revoked or reset section: no data, the request
// cursor echoed.
func (r *request) emptySection(sub *wire.Subscription, status wire.SubStatus, reason string) error {
	if err := r.enc.Encode(&wire.SubStart{ID: sub.ID, Status: status, ReasonCode: reason, EffectiveScopes: wire.ScopeMap{}}); err != nil {
		return err
	}
	return r.enc.Encode(&wire.SubEnd{NextCursor: sub.Cursor})
}

// saveClient records the client's binding, cursor and subscription list
// (§4.5, §8.1). A push-only request from a known client changes nothing.
func (r *request) saveClient(ctx context.Context) error {
	prev := r.client
	if r.req.Pull == nil && prev != nil && prev.WireVersion == r.req.Version {
		return nil
	}
	rec := store.ClientRecord{ClientID: r.req.Header.ClientID, ActorID: r.auth.ActorID,
		WireVersion: r.req.Version, Cursor: -1, UpdatedAtMs: r.e.cfg.Now()}
	if prev != nil {
		rec.Cursor, rec.Subscriptions = prev.Cursor, prev.Subscriptions
	}
	if r.req.Pull != nil {
		rec.Subscriptions = make([]store.SubscriptionRecord, len(r.req.Subscriptions))
		first := true
		var answered int64
		for i, sub := range r.req.Subscriptions {
			rec.Subscriptions[i] = store.SubscriptionRecord{ID: sub.ID, Table: sub.Table,
				Scopes: scopeMapToMap(sub.Scopes), SchemaVersion: r.cs.Version()}
			out := r.pulled[i]
			if !out.active {
				continue
			}
			// What the client proved it holds: the cursor it sent, not
			// the one this response answers, which may never arrive (a
			// record ahead of the client would tell its next socket that
			// it is in sync, and the next commit would reach it as a
			// delta past what it holds). A subscription that has no
			// cursor yet (a bootstrap) counts its answer: it applies no
			// delta before it has one.
			held := out.nextCursor
			if sub.Cursor >= 0 && sub.Cursor < held {
				held = sub.Cursor
			}
			if first || held < rec.Cursor {
				rec.Cursor = held
			}
			if first || out.nextCursor < answered {
				answered = out.nextCursor
			}
			first = false
		}
		// The stored cursor was proved too (sent, or acked after a delta,
		// §8.2): over the same subscriptions it stays, up to this answer.
		// An ack covers the subscriptions the delta did not touch, whose
		// cursors the client sends lower.
		if !first && prev != nil && prev.Cursor > rec.Cursor && store.SubscriptionsEqual(prev.Subscriptions, rec.Subscriptions) {
			rec.Cursor = min(prev.Cursor, answered)
		}
		r.savedSubs = store.SubscriptionsDigest(rec.Subscriptions)
	}
	var err error
	if d, ok := r.e.cfg.Store.(store.ClientDeferrer); ok && r.deferrable(prev, rec) {
		err = d.DeferClient(ctx, r.auth.Partition, r.partition.LogEpoch, rec, prev.Cursor)
		if errors.Is(err, store.ErrDeferFull) {
			err = r.e.cfg.Store.PutClient(ctx, r.auth.Partition, rec)
		}
	} else {
		err = r.e.cfg.Store.PutClient(ctx, r.auth.Partition, rec)
	}
	switch {
	case errors.Is(err, store.ErrClientBound):
		return errClientBound()
	case errors.Is(err, store.ErrStorageFull):
		// The pull itself is answered: its data and cursors are in the
		// response, and the record only follows the client. With the
		// storage full it is not updated, and reads keep working.
		r.e.cfg.Logger.WarnContext(ctx, "client record not saved: storage full", "partition", r.auth.Partition, "err", err)
		return nil
	}
	return err
}

// deferFreshFor is how recently a client record must have been written
// for a cursor-only change of it to be deferred: a record that old is
// inside any retention window, so the deferred update time cannot take
// the client out of the active ones meanwhile.
const deferFreshFor = 60_000 // ms

// deferrable reports whether the new record only moves the stored one's
// cursor forward and its update time: the same actor, wire version and
// subscription list. Such a write may be deferred (store.ClientDeferrer);
// any other is written before the response ends, so a socket that connects
// to another server of the fleet right after reads it.
func (r *request) deferrable(prev *store.ClientRecord, rec store.ClientRecord) bool {
	return prev != nil && prev.ActorID == rec.ActorID && prev.WireVersion == rec.WireVersion &&
		rec.Cursor >= prev.Cursor && rec.UpdatedAtMs-prev.UpdatedAtMs < deferFreshFor &&
		store.SubscriptionsEqual(prev.Subscriptions, rec.Subscriptions)
}

// bootstrapToken is the resume token of §4.7.
type bootstrapToken struct {
	AsOfCommitSeq int64    `json:"asOfCommitSeq"`
	Tables        []string `json:"tables"`
	TableIndex    int      `json:"tableIndex"`
	RowCursor     *string  `json:"rowCursor"`
}

// parseToken reads a resume token; an unusable one restarts the bootstrap
// (never a request error). A token must have the §4.7 shape whole: all
// four fields, of their types, and no other; one that lacks a field
// would otherwise read it as zero (a pin at 0, the first table).
func parseToken(raw *string, table string, p store.Partition) (bootstrapToken, bool) {
	if raw == nil {
		return bootstrapToken{}, false
	}
	var fields struct {
		AsOfCommitSeq *int64          `json:"asOfCommitSeq"`
		Tables        []string        `json:"tables"`
		TableIndex    *int            `json:"tableIndex"`
		RowCursor     json.RawMessage `json:"rowCursor"`
	}
	dec := json.NewDecoder(strings.NewReader(*raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&fields); err != nil || dec.More() ||
		fields.AsOfCommitSeq == nil || fields.Tables == nil || fields.TableIndex == nil || fields.RowCursor == nil {
		return bootstrapToken{}, false
	}
	t := bootstrapToken{AsOfCommitSeq: *fields.AsOfCommitSeq, Tables: fields.Tables, TableIndex: *fields.TableIndex}
	if string(fields.RowCursor) != "null" {
		var c string
		if err := json.Unmarshal(fields.RowCursor, &c); err != nil {
			return bootstrapToken{}, false
		}
		t.RowCursor = &c
	}
	if len(t.Tables) != 1 || t.Tables[0] != table || t.TableIndex != 0 ||
		t.AsOfCommitSeq < p.HorizonSeq || t.AsOfCommitSeq > p.MaxCommitSeq || t.AsOfCommitSeq < 0 {
		return bootstrapToken{}, false
	}
	return t, true
}
