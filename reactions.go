package syncgo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncgo/syncgo/internal/reactor"
	"github.com/syncgo/syncgo/reaction"
	"github.com/syncgo/syncgo/store"
)

// ReactionConfig configures durable reactions (§6.9): the planner that
// runs in the push transaction, the handlers and the runner's tuning. See
// package reaction and docs/reactions.md.
type ReactionConfig = reaction.Config

// ReactionBacklog is the state of the reactions not completed.
type ReactionBacklog = reaction.Backlog

// ErrNoReactions is the error of the reaction methods of a Server whose
// store keeps no reactions.
var ErrNoReactions = errors.New("syncgo: the store keeps no reactions")

// initReactions checks Config.Reactions and builds the runner (started by
// Start) and its metrics.
func (s *Server) initReactions() error {
	rc := s.cfg.Reactions
	if rc == nil {
		return nil
	}
	if err := rc.Check(); err != nil {
		return fmt.Errorf("Config.Reactions: %w", err)
	}
	// The server keeps a copy: a host changing its map later changes
	// nothing under the runner's feet.
	c := *rc
	c.Handlers = maps.Clone(rc.Handlers)
	s.cfg.Reactions, rc = &c, &c
	rs, ok := s.cfg.Store.(store.ReactionStore)
	if !ok {
		return errors.New("Config.Reactions: the store keeps no reactions")
	}
	s.reactor = reactor.New(reactor.Config{Store: rs, Reactions: *rc, Now: s.cfg.Now, Logger: s.cfg.Logger,
		Owner: processName()})
	if s.cfg.Metrics != nil {
		if err := s.cfg.Metrics.Register(newReactionCollector(s)); err != nil {
			return fmt.Errorf("register metrics: %w", err)
		}
	}
	return nil
}

// processName names this process in lease-owner tokens: host, pid and a
// random suffix (two servers of one process differ).
func processName() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// startReactions starts the runner, unless this process runs no handler.
func (s *Server) startReactions() {
	if s.reactor != nil && s.cfg.Reactions.Workers >= 0 && len(s.cfg.Reactions.Handlers) > 0 {
		s.reactorOn.Store(true)
		s.reactor.Start()
	}
}

// stopReactions stops the runner (see reactor.Runner.Stop).
func (s *Server) stopReactions(ctx context.Context) error {
	if !s.reactorOn.Load() {
		return nil
	}
	return s.reactor.Stop(ctx)
}

// wakeReactions wakes the runner after a commit planned reactions.
func (s *Server) wakeReactions() {
	if s.reactor != nil {
		s.reactor.Wake()
	}
}

func (s *Server) reactionStore() (store.ReactionStore, error) {
	rs, ok := s.cfg.Store.(store.ReactionStore)
	if !ok {
		return nil, ErrNoReactions
	}
	return rs, nil
}

// ReactionBacklog returns the counts of the reactions not completed, in
// every partition, by state (pending, running, dead letters), and the age
// of the oldest pending one.
func (s *Server) ReactionBacklog(ctx context.Context) (ReactionBacklog, error) {
	rs, err := s.reactionStore()
	if err != nil {
		return ReactionBacklog{}, err
	}
	now := s.cfg.Now()
	b, err := rs.ReactionBacklog(ctx, now)
	if err != nil {
		return ReactionBacklog{}, err
	}
	out := ReactionBacklog{Pending: b.Pending, Running: b.Running, Dead: b.Dead}
	if b.Pending > 0 && b.OldestPendingCreatedAtMs > 0 {
		out.OldestPending = time.Duration(max(now-b.OldestPendingCreatedAtMs, 0)) * time.Millisecond
	}
	return out, nil
}

// ListReactions reads stored reactions (operators: dead letters with
// q.State store.ReactionDead), a page at a time.
func (s *Server) ListReactions(ctx context.Context, q store.ReactionQuery) ([]store.Reaction, error) {
	rs, err := s.reactionStore()
	if err != nil {
		return nil, err
	}
	return rs.ListReactions(ctx, q)
}

// RetryReaction makes a dead letter pending again, due now, with its
// attempts and failure cleared; false when no dead letter has that key.
func (s *Server) RetryReaction(ctx context.Context, partition, idempotencyKey string) (bool, error) {
	rs, err := s.reactionStore()
	if err != nil {
		return false, err
	}
	ok, err := rs.RetryReaction(ctx, partition, idempotencyKey, s.cfg.Now())
	if ok {
		s.wakeReactions()
	}
	return ok, err
}

// DropReaction deletes a dead letter; false when no dead letter has that
// key.
func (s *Server) DropReaction(ctx context.Context, partition, idempotencyKey string) (bool, error) {
	rs, err := s.reactionStore()
	if err != nil {
		return false, err
	}
	return rs.DropReaction(ctx, partition, idempotencyKey)
}

// reactionCollector reports the reaction backlog (read from the database
// at scrape time, bounded like the readiness check) and the runner's
// counters.
type reactionCollector struct {
	s *Server

	backlog, oldest, running, claimed, outcomes *prometheus.Desc
}

func newReactionCollector(s *Server) *reactionCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &reactionCollector{s: s,
		backlog: d("syncgo_reactions", "Durable reactions not completed, in every partition, by state "+
			"(pending: waiting for a runner; running: leased; dead: dead letters).", "state"),
		oldest:  d("syncgo_reactions_oldest_pending_seconds", "Age of the oldest pending reaction, from its commit; 0 when none."),
		running: d("syncgo_reaction_handlers_running", "Reaction handlers this process runs now."),
		claimed: d("syncgo_reaction_attempts_total", "Reaction attempts this process started."),
		outcomes: d("syncgo_reaction_outcomes_total", "Reaction attempts of this process by outcome "+
			"(completed, retried, dead_lettered, released, lost_lease).", "outcome"),
	}
}

// Describe implements prometheus.Collector.
func (c *reactionCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.backlog, c.oldest, c.running, c.claimed, c.outcomes} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *reactionCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	st := c.s.reactor.Stats()
	gauge(c.running, float64(st.Running))
	counter(c.claimed, st.Claimed)
	counter(c.outcomes, st.Completed, "completed")
	counter(c.outcomes, st.Retried, "retried")
	counter(c.outcomes, st.DeadLettered, "dead_lettered")
	counter(c.outcomes, st.Released, "released")
	counter(c.outcomes, st.LostLeases, "lost_lease")
	ctx, cancel := context.WithTimeout(context.Background(), scrapeReadyTimeout)
	defer cancel()
	b, err := c.s.ReactionBacklog(ctx)
	if err != nil {
		c.s.cfg.Logger.Warn("metrics: reaction backlog not read", "err", err)
		return
	}
	gauge(c.backlog, float64(b.Pending), "pending")
	gauge(c.backlog, float64(b.Running), "running")
	gauge(c.backlog, float64(b.Dead), "dead")
	gauge(c.oldest, b.OldestPending.Seconds())
}
