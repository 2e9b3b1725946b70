package realtime

import (
	"context"
	"time"

	"github.com/syncgo/syncgo/internal/engine"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// remoteBatch bounds the commits read for one remote notification; a
// larger gap is answered with catch-up wakes instead.
const remoteBatch = 1000

// Listen fans out the commits that other server instances append to a
// shared database (Postgres LISTEN/NOTIFY), until ctx ends. Commits this
// instance already delivered are skipped; after a listener reconnect, the
// partitions with sessions are checked for commits missed meanwhile.
func (h *Hub) Listen(ctx context.Context, l store.CommitListener) error {
	if heads, ok := h.cfg.Store.(store.CommitHeadsReader); ok {
		sweepCtx, stop := context.WithCancel(ctx)
		defer stop()
		go h.sweepQuiet(sweepCtx, heads)
	}
	return l.ListenCommits(ctx, func(n store.CommitNotification) {
		if n.Grants {
			// Resolver calls must not hold up the listener.
			go h.Reresolve(ctx, n.Partition, n.ActorID)
			return
		}
		if n.Lost {
			h.stats.listenerUp.Store(false)
			return
		}
		if n.Reconnected {
			h.stats.listenerUp.Store(true)
			h.catchUpAll(ctx)
			h.stats.listenerConnects.Add(1)
			// Grant notifications may have been missed too.
			go h.Reresolve(ctx, "", "")
			return
		}
		h.remote(ctx, n.Partition, n.Seq)
	})
}

// remote delivers the commits of a partition up to seq that this
// instance has not fanned out yet.
func (h *Hub) remote(ctx context.Context, partition string, seq int64) {
	p := h.part(partition, false)
	if p == nil {
		return
	}
	if h.coverStarting(p, seq) {
		return
	}
	p.mu.Lock()
	p.noticed = time.Now()
	next, idle := p.next, len(p.sessions) == 0
	p.mu.Unlock()
	if idle || next == 0 || seq < next {
		return
	}
	h.deliverRange(ctx, p, next-1, seq)
}

// quietSweepBatch bounds the partitions whose heads one read asks for.
const quietSweepBatch = 5000

// sweepQuiet runs every QuietSweep until ctx ends: the partitions with
// sessions that have had no notification for that long have their newest
// commit read (in batches, one statement each), and commits past what
// fan-out delivered are delivered now. They are commits whose
// notification never came: their process died after the COMMIT and
// before it announced them (a failed notification is sent again by a
// process that lives), and in a quiet partition no later commit carries
// them along.
func (h *Hub) sweepQuiet(ctx context.Context, heads store.CommitHeadsReader) {
	t := time.NewTicker(h.cfg.QuietSweep)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		quiet := map[string]*partition{}
		ids := []string{}
		cutoff := time.Now().Add(-h.cfg.QuietSweep)
		for _, p := range h.partitions() {
			p.mu.Lock()
			if len(p.sessions) > 0 && p.next != 0 && p.noticed.Before(cutoff) {
				quiet[p.id] = p
				ids = append(ids, p.id)
			}
			p.mu.Unlock()
		}
		for len(ids) > 0 && ctx.Err() == nil {
			n := min(len(ids), quietSweepBatch)
			got, err := heads.CommitHeads(ctx, ids[:n])
			if err != nil {
				h.cfg.Logger.Debug("realtime: quiet sweep: reading commit heads failed", "err", err)
				break
			}
			for id, seq := range got {
				p := quiet[id]
				p.mu.Lock()
				next := p.next
				p.mu.Unlock()
				if next != 0 && seq >= next {
					h.cfg.Logger.Info("realtime: delivering commits whose notification never came", "partition", id, "after", next-1, "through", seq)
					h.deliverRange(ctx, p, next-1, seq)
				}
			}
			ids = ids[n:]
		}
	}
}

// coverStarting handles a remote commit through seq for a partition whose
// sessions are all still starting (its fan-out has no position yet): their
// read of the partition may have come before the commit, so their hello
// is made to cover it, as a local Notify's fan-out does. It reports
// whether the partition was in that state.
func (h *Hub) coverStarting(p *partition, seq int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.next != 0 || len(p.sessions) == 0 {
		return false
	}
	for s := range p.sessions {
		s.mu.Lock()
		if s.starting {
			s.observed = max(s.observed, seq)
		}
		s.mu.Unlock()
	}
	return true
}

// deliverRange reads (after, through] and notifies it, or wakes every
// session of the partition when the range is too large or unreadable.
func (h *Hub) deliverRange(ctx context.Context, p *partition, after, through int64) {
	if through-after > remoteBatch {
		h.wakeAll(p, through)
		return
	}
	commits, err := h.cfg.Store.ReadCommits(ctx, p.id, after, through, remoteBatch)
	if err != nil {
		h.cfg.Logger.Warn("realtime: reading remote commits failed; waking sessions", "partition", p.id, "err", err)
		h.wakeAll(p, through)
		return
	}
	// The serve gate, read after the commits: a commit another process
	// appended after migrating to a newer schema (or while a checkpoint
	// this process did not declare is pending) is not this process's to
	// serve, and its rows may have a layout the sessions' clients cannot
	// read. The sessions are woken instead: their pull meets the gate.
	if open, err := h.cfg.Engine.GateOpen(ctx, p.id); err != nil || !open {
		if err != nil {
			h.cfg.Logger.Warn("realtime: reading the serve gate failed; waking sessions", "partition", p.id, "err", err)
		}
		h.wakeAll(p, through)
		return
	}
	for _, c := range commits {
		h.Notify(engine.CommitNotice{Partition: p.id, Seq: c.Seq, CreatedAtMs: c.CreatedAtMs, ActorID: c.ActorID, Changes: c.Changes})
	}
}

// partitions returns the partitions the hub holds now.
func (h *Hub) partitions() []*partition {
	h.mu.Lock()
	defer h.mu.Unlock()
	parts := make([]*partition, 0, len(h.parts))
	for _, p := range h.parts {
		parts = append(parts, p)
	}
	return parts
}

// catchUpAll checks every partition with sessions for commits appended
// while the listener was down.
func (h *Hub) catchUpAll(ctx context.Context) {
	for _, p := range h.partitions() {
		p.mu.Lock()
		next, idle := p.next, len(p.sessions) == 0
		p.mu.Unlock()
		if idle {
			continue
		}
		st, err := h.cfg.Store.Partition(ctx, p.id)
		if err != nil {
			if next != 0 {
				h.wakeAll(p, next)
			}
			continue
		}
		if h.coverStarting(p, st.MaxCommitSeq) {
			continue // their hello covers what the outage hid
		}
		p.mu.Lock()
		next = p.next // set meanwhile by a session's start, maybe
		p.mu.Unlock()
		if next != 0 && st.MaxCommitSeq >= next {
			h.deliverRange(ctx, p, next-1, st.MaxCommitSeq)
		}
	}
}

// wakeAll sends a catch-up wake to every session of a partition and
// suppresses their deltas until they acknowledge.
func (h *Hub) wakeAll(p *partition, cursor int64) {
	h.stats.gaps.Add(1)
	// The wake covers every commit through cursor: fan-out expects the
	// next one, so a later notification is not read back to here again.
	p.mu.Lock()
	if cursor >= p.next {
		p.next = cursor + 1
		for seq := range p.pending {
			if seq <= cursor {
				delete(p.pending, seq)
			}
		}
	}
	p.mu.Unlock()
	sessions := h.sessionsOf(p)
	for _, s := range sessions {
		s.mu.Lock()
		if !s.starting {
			s.observed = max(s.observed, cursor)
			s.suppressed = true
			s.wakeLocked(wire.WakeCatchupRequired)
		}
		s.mu.Unlock()
	}
	if h.cfg.ReresolveOn != nil {
		// The commits skipped may have changed what grant queries read:
		// resolve the sessions again, off the listener's goroutine (a
		// session acknowledging without a pull is narrowed too).
		go h.reresolveAll(sessions)
	}
}
