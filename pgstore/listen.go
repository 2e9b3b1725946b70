package pgstore

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo/store"
)

// Commit notifications (§8.2 across server instances): a write batch that
// appended runs pg_notify with its newest sequence right after its COMMIT
// (see the package documentation), only if that sequence is committed, so
// the notification comes once the batch is durable and visible, in commit
// order per partition; a receiver reads the commits up to the sequence.
// ListenCommits receives them on a dedicated connection.
//
// Channel: syncgo_commits, database-wide like every NOTIFY channel, which
// is why the payload names the schema. Payload:
//
//	<seq>:<schema>:<partition>
//
// seq is the batch's newest sequence in decimal, schema the store's schema
// (current_schema() at Open) and partition the partition id verbatim, up
// to the end of the payload, so every partition id round-trips whatever
// characters it holds. A listener keeps the payloads of its own schema:
// those that start with "<seq>:<its schema>:". (A schema whose name is
// another's followed by ':' and more could make a listener misread a
// foreign notification as one of a partition named like the rest: it then
// only reads its own log for commits that are not there.)
//
// Postgres refuses payloads of 8000 bytes or more. A commit whose payload
// would reach that (a partition id of about 7.9 KB) is announced as
//
//	<seq>:<schema>
//
// without its partition, which a listener reports as a notification with
// Reconnected set: the receiver checks every partition it serves for new
// commits, as after a reconnect. Such ids are rare (the primary keys of the
// sync tables hold them only when they compress well), so the costlier
// catch-up is preferred to any lossy encoding.
//
// The same channel carries grant notifications (GrantNotifier):
//
//	grants:<schema>:<n>:<partition><actor>
//
// n is the partition id's length in bytes, in decimal, so that both ids
// round-trip whatever characters they hold; an empty actor means every
// actor of the partition. One that would reach the payload limit is sent
// as "grants:<schema>", every partition and actor. Listeners of older
// builds ignore these payloads (they do not start with a sequence).
// probePrefix starts the payload of a delivery probe (probeDelivery).
const probePrefix = "probe:"

// errListenNoDelivery is why a listen connection through a pooler that
// does not deliver notifications is given up.
var errListenNoDelivery = errors.New("the listen connection delivers no notifications")

const (
	notifyChannel      = "syncgo_commits"
	notifyPayloadLimit = "8000"
	grantsPrefix       = "grants:"
	// maxNotifyPayload is the largest payload Postgres accepts.
	maxNotifyPayload = 7999
)

var _ store.GrantNotifier = (*Store)(nil)

// NotifyGrants announces to every process listening on the store's schema
// that an actor's grants in a partition changed.
func (s *Store) NotifyGrants(ctx context.Context, partition, actorID string) error {
	if err := s.check(); err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, "SELECT pg_notify($1, $2)", notifyChannel, grantsPayload(s.dbSchema, partition, actorID)); err != nil {
		return fmt.Errorf("pgstore: notify grants: %w", err)
	}
	return nil
}

// grantsPayload is the grant notification of an actor's grants in a
// partition of a schema, or of every grant of the schema when that would
// reach the payload limit.
func grantsPayload(schema, partition, actorID string) string {
	payload := grantsPrefix + schema + ":" + strconv.Itoa(len(partition)) + ":" + partition + actorID
	if len(payload) > maxNotifyPayload {
		payload = grantsPrefix + schema
	}
	return payload
}

// parseGrants decodes a grant notification of the store's schema.
func parseGrants(payload, schema string) (n store.CommitNotification, ok bool) {
	rest, found := strings.CutPrefix(payload, grantsPrefix+schema)
	if !found {
		return n, false
	}
	if rest == "" {
		return store.CommitNotification{Grants: true}, true
	}
	rest, found = strings.CutPrefix(rest, ":")
	if !found {
		return n, false
	}
	lenText, ids, found := strings.Cut(rest, ":")
	size, err := strconv.Atoi(lenText)
	if !found || err != nil || size < 0 || size > len(ids) {
		return n, false
	}
	return store.CommitNotification{Grants: true, Partition: ids[:size], ActorID: ids[size:]}, true
}

// Listener tuning.
const (
	// listenBackoffMin and listenBackoffMax bound the delay before a
	// reconnect, doubled after each failure (with jitter); a connection
	// that stayed up listenStable starts over at the minimum.
	listenBackoffMin = 250 * time.Millisecond
	listenBackoffMax = 15 * time.Second
	listenStable     = time.Minute
	// listenProbeAfter is how long the connection may stay silent before
	// it is pinged, so that a dead peer (no RST) is noticed.
	listenProbeAfter = 30 * time.Second
	// listenTimeout bounds a connect, the LISTEN and its delivery probe,
	// a ping and the close.
	listenTimeout = 15 * time.Second
	// listenDeliveryWaitDefault is how long a delivery probe waits for
	// its notification (probeDelivery).
	listenDeliveryWaitDefault = 5 * time.Second
)

var _ store.CommitListener = (*Store)(nil)

// ListenCommits calls fn for each commit appended to the store's schema
// by any process, until ctx ends or the store is closed; it then closes
// its connection and returns nil. It returns an error only when it cannot
// start: a closed store or an unparsable ListenURL.
//
// It listens on a dedicated connection opened with pgx.Connect, not taken
// from the pool (see Config.ListenURL). When the connection fails it
// reconnects, after a delay that doubles from 250 ms to 15 s, as long as
// it takes. After every successful LISTEN, the first included, fn
// receives a notification with Reconnected set: commits appended while no
// LISTEN was in effect were not announced to this listener, and the
// receiver must check the partitions it serves for them. fn also receives
// one for a commit whose partition id is too long for a payload (see the
// payload format above).
//
// fn runs on the listener's goroutine, one notification at a time, in
// commit order; notifications wait in Postgres's queue while it runs.
func (s *Store) ListenCommits(ctx context.Context, fn func(store.CommitNotification)) error {
	if err := s.check(); err != nil {
		return err
	}
	cfg, err := s.listenConfig()
	if err != nil {
		return fmt.Errorf("pgstore: listen: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	delay := listenBackoffMin
	for {
		up, err := s.listenOnce(ctx, cfg, fn)
		if ctx.Err() != nil {
			return nil
		}
		fn(store.CommitNotification{Lost: true})
		if up >= listenStable {
			delay = listenBackoffMin
		}
		wait := delay/2 + rand.N(delay/2+1)
		s.log.WarnContext(ctx, "pgstore: commit listener connection lost; reconnecting",
			"err", err, "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		delay = min(2*delay, listenBackoffMax)
	}
}

// listenConfig is the configuration of the listen connection: ListenURL,
// else the pool's connection settings, named for pg_stat_activity.
func (s *Store) listenConfig() (*pgx.ConnConfig, error) {
	var cfg *pgx.ConnConfig
	if s.cfg.ListenURL != "" {
		c, err := pgx.ParseConfig(s.cfg.ListenURL)
		if err != nil {
			return nil, fmt.Errorf("parse ListenURL: %w", err)
		}
		if err := setTCP(&c.Config); err != nil {
			return nil, fmt.Errorf("ListenURL: %w", err)
		}
		cfg = c
	} else {
		cfg = s.pool.Config().ConnConfig.Copy()
	}
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = "syncgo-listen-" + strconv.Itoa(os.Getpid())
	}
	return cfg, nil
}

// listenOnce connects, listens and delivers notifications until the
// connection fails or ctx ends. It returns how long LISTEN was in effect
// and why it stopped.
func (s *Store) listenOnce(ctx context.Context, cfg *pgx.ConnConfig, fn func(store.CommitNotification)) (time.Duration, error) {
	cctx, cancel := context.WithTimeout(ctx, listenTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, cfg)
	if err != nil {
		return 0, fmt.Errorf("connect: %w", err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), listenTimeout)
		defer cancel()
		_ = conn.Close(ctx)
	}()
	pooled, err := behindPooler(cctx, conn)
	if err != nil {
		return 0, err
	}
	if pooled && !s.listenPooled.Swap(true) {
		s.log.WarnContext(ctx, "pgstore: the listen connection reaches Postgres through a connection pooler: other processes' commits are announced to this one only if that pooler runs in session mode. Behind a transaction-mode pooler, point db_listen (pgstore.Config.ListenURL) at Postgres directly",
			"host", cfg.Host, "port", cfg.Port)
	}
	if _, err := conn.Exec(cctx, "LISTEN "+notifyChannel); err != nil {
		return 0, fmt.Errorf("listen: %w", err)
	}
	if pooled {
		if err := s.probeDelivery(cctx, conn); err != nil {
			return 0, err
		}
	}
	start := time.Now()
	s.log.DebugContext(ctx, "pgstore: listening for commits", "pid", conn.PgConn().PID(), "schema", s.dbSchema)
	fn(store.CommitNotification{Reconnected: true})
	for {
		wctx, cancel := context.WithTimeout(ctx, s.listenProbe)
		n, err := conn.WaitForNotification(wctx)
		idle := err != nil && wctx.Err() != nil
		cancel()
		switch {
		case ctx.Err() != nil:
			return time.Since(start), ctx.Err()
		case err == nil:
			if n == nil {
				continue
			}
			if cn, ok := parseNotification(n.Payload, s.dbSchema); ok {
				fn(cn)
			}
		case idle && !conn.IsClosed():
			pctx, cancel := context.WithTimeout(ctx, listenTimeout)
			err := conn.Ping(pctx)
			cancel()
			if err != nil && ctx.Err() == nil {
				return time.Since(start), fmt.Errorf("ping: %w", err)
			}
		default:
			return time.Since(start), err
		}
	}
}

// probeDelivery checks that conn, which listens through a connection
// pooler, receives notifications: it sends one through the pool and waits
// for it. A transaction-mode pooler takes LISTEN and hands the server
// connection that ran it to other clients, so nothing reaches conn;
// listening on it would report the listener up while no other process's
// commit is announced. Notifications other than the probe that arrive
// meanwhile are dropped: the Reconnected that follows covers them.
//
// The payload, "probe:<schema>:<random>", is ignored by every listener
// (it does not start with a sequence).
func (s *Store) probeDelivery(ctx context.Context, conn *pgx.Conn) error {
	var b [8]byte
	_, _ = crand.Read(b[:])
	payload := probePrefix + s.dbSchema + ":" + hex.EncodeToString(b[:])
	if _, err := s.pool.Exec(ctx, "SELECT pg_notify($1, $2)", notifyChannel, payload); err != nil {
		return fmt.Errorf("delivery probe: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, s.listenDeliveryWait)
	defer cancel()
	for {
		n, err := conn.WaitForNotification(wctx)
		switch {
		case err == nil && n.Payload == payload:
			return nil
		case err == nil:
		case wctx.Err() != nil && ctx.Err() == nil:
			return fmt.Errorf("%w: no notification arrived within %v on a connection through a pooler (a transaction-mode pooler does not deliver them; point db_listen, pgstore.Config.ListenURL, at Postgres directly or at a session-mode pooler)",
				errListenNoDelivery, s.listenDeliveryWait)
		default:
			return fmt.Errorf("delivery probe: %w", err)
		}
	}
}

// parseNotification decodes a payload of the store's schema; ok is false
// for another schema's payload and for one that is not syncgo's.
func parseNotification(payload, schema string) (n store.CommitNotification, ok bool) {
	if strings.HasPrefix(payload, grantsPrefix) {
		return parseGrants(payload, schema)
	}
	seqText, rest, found := strings.Cut(payload, ":")
	if !found {
		return n, false
	}
	seq, err := strconv.ParseInt(seqText, 10, 64)
	if err != nil || seq <= 0 {
		return n, false
	}
	if rest == schema {
		// The partition did not fit: check them all.
		return store.CommitNotification{Reconnected: true}, true
	}
	partition, found := strings.CutPrefix(rest, schema+":")
	if !found {
		return n, false
	}
	return store.CommitNotification{Partition: partition, Seq: seq}, true
}
