package realtime

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"time"

	"github.com/gobwas/ws"

	"github.com/syncgo/syncgo/internal/engine"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// registration is one subscription registered on a connection: deltas of
// its table inside its effective scopes reach the connection.
type registration struct {
	id        string
	table     string
	effective wire.ScopeMap
}

// session is one connected client.
type session struct {
	hub      *Hub
	part     *partition
	conn     *wsConn
	id       string
	auth     engine.Auth
	clientID string
	epoch    string
	expires  time.Time

	mu          sync.Mutex
	version     uint16
	regs        []registration
	sig         string          // identifies regs+version for the delta cache
	keys        map[string]bool // presence scope keys the registrations hold
	observed    int64           // highest notification sequence observed
	suppressed  bool            // behind: wakes instead of deltas until an ack
	lastWakeMs  int64
	ackPending  bool
	ackCursor   int64
	roundActive bool
	round       *roundState
	presence    map[string]bool // keys this session published on
}

func (s *session) expired(now time.Time) bool {
	return !s.expires.IsZero() && now.After(s.expires)
}

// setRegistrations replaces the registrations (at connect, at round end)
// and re-derives the presence grant (§8.6.3).
func (s *session) setRegistrations(regs []registration, version uint16) {
	keys := map[string]bool{}
	schema := s.hub.cfg.Engine.Schema()
	var sig strings.Builder
	sig.WriteByte(byte(version))
	for _, r := range regs {
		sig.WriteString(r.id)
		sig.WriteByte(0)
		sig.WriteString(r.table)
		sig.WriteByte(0)
		for _, e := range r.effective {
			sig.WriteString(e.Key)
			sig.WriteByte(1)
			for _, v := range e.Values {
				sig.WriteString(v)
				sig.WriteByte(2)
			}
		}
		sig.WriteByte(3)
		if t, ok := schema.Table(r.table); ok {
			for _, sc := range t.Scopes() {
				for _, e := range r.effective {
					if e.Key == sc.Pattern.Variable {
						for _, v := range e.Values {
							keys[sc.Pattern.Key(v)] = true
						}
					}
				}
			}
		}
	}
	s.mu.Lock()
	old := s.keys
	s.regs, s.version, s.sig, s.keys = regs, version, sig.String(), keys
	s.mu.Unlock()
	s.hub.presenceRegistrationChanged(s, old, keys)
}

func (s *session) sendData(f frame) {
	if err := s.conn.send(f); err == errQueueFull {
		s.hub.stats.closedSlow.Add(1)
		s.conn.closeWith(ws.StatusPolicyViolation, "consumer too slow")
	}
}

// wake sends a coalescible wake-up (§8.3), at most one per 50 ms.
func (s *session) wake(reason wire.WakeReason, cursor int64) {
	now := s.hub.cfg.Now()
	s.mu.Lock()
	if reason == wire.WakeCatchupRequired && now-s.lastWakeMs < 50 && s.lastWakeMs != 0 {
		s.mu.Unlock()
		return
	}
	s.lastWakeMs = now
	s.mu.Unlock()
	s.hub.stats.wakes.Add(1)
	s.sendData(textFrame(wire.Wake{Cursor: cursor, Reason: reason, Timestamp: now}.AppendJSON(nil)))
}

// deliver handles one commit notification for this session (§8.2).
func (s *session) deliver(n engine.CommitNotice, cache map[string]frame) {
	s.mu.Lock()
	if n.Seq <= s.observed {
		s.mu.Unlock()
		return
	}
	gap := n.Seq != s.observed+1
	s.observed = n.Seq
	matches := false
	for _, r := range s.regs {
		if sectionChanges(r, n.Changes) != nil {
			matches = true
			break
		}
	}
	if !matches {
		s.mu.Unlock()
		return
	}
	var reason *int64
	switch {
	case s.roundActive:
		s.hub.stats.dropsInRound.Add(1)
		reason = &n.Seq
	case s.suppressed:
		s.hub.stats.dropsBehind.Add(1)
		reason = &n.Seq
	case gap:
		s.hub.stats.dropsBehind.Add(1)
		reason = &n.Seq
	}
	if reason != nil {
		s.suppressed = true
		s.mu.Unlock()
		s.wake(wire.WakeCatchupRequired, n.Seq)
		return
	}
	sig, version, regs := s.sig, s.version, s.regs
	s.mu.Unlock()
	f, ok := cache[sig]
	if !ok {
		payload := encodeDelta(n, regs, version, s.epoch, s.hub.cfg.Engine.Schema().Version())
		f = binaryFrame(payload)
		cache[sig] = f
	}
	if len(f.b) > s.hub.cfg.MaxDeltaBytes {
		s.hub.stats.dropsTooLarge.Add(1)
		s.suppress()
		s.wake(wire.WakeDeltaTooLarge, n.Seq)
		return
	}
	if err := s.conn.send(f); err != nil {
		if err == errQueueFull {
			s.hub.stats.dropsQueueFull.Add(1)
			s.suppress()
			s.wake(wire.WakeCatchupRequired, n.Seq)
		}
		return
	}
	s.hub.stats.deltas.Add(1)
}

func (s *session) suppress() {
	s.mu.Lock()
	s.suppressed = true
	s.mu.Unlock()
}

// ack records a client acknowledgment (§8.2): deltas resume once it covers
// every notification observed; the cursor is persisted by the flusher.
func (s *session) ack(cursor int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cursor > s.observed {
		s.observed = cursor
	}
	if s.suppressed && cursor >= s.observed {
		s.suppressed = false
	}
	if !s.ackPending || cursor > s.ackCursor {
		s.ackCursor = max(s.ackCursor, cursor)
	}
	s.ackPending = true
}

func (s *session) takeAck() (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ackPending {
		return 0, false
	}
	s.ackPending = false
	return s.ackCursor, true
}

// sectionChanges returns the changes of a commit that a registration
// receives, or nil.
func sectionChanges(r registration, changes []store.Change) []wire.Change {
	var out []wire.Change
	for _, ch := range changes {
		if ch.Table == r.table && store.MatchScopes(ch.Scopes, r.effective) {
			out = append(out, wire.Change{RowID: ch.RowID, Op: ch.Op, RowVersion: ch.RowVersion, Scopes: ch.Scopes, Row: ch.Payload})
		}
	}
	return out
}

// encodeDelta encodes the 0x00-tagged delta message of a commit for a set
// of registrations: one SUB_START / COMMIT / SUB_END section per matching
// registration.
func encodeDelta(n engine.CommitNotice, regs []registration, version uint16, epoch string, schemaVersion int32) []byte {
	var buf bytes.Buffer
	buf.WriteByte(wire.ChannelTagDelta)
	enc, _ := wire.NewEncoder(&buf, wire.KindResponse, version)
	hdr := &wire.RespHeader{LatestSchemaVersion: &schemaVersion}
	if version >= wire.Version2 {
		hdr.LogEpoch = epoch
	}
	_ = enc.Encode(hdr)
	for _, r := range regs {
		changes := sectionChanges(r, n.Changes)
		if changes == nil {
			continue
		}
		_ = enc.Encode(&wire.SubStart{ID: r.id, Status: wire.SubActive, EffectiveScopes: r.effective})
		_ = enc.Encode(&wire.Commit{CommitSeq: n.Seq, CreatedAtMs: n.CreatedAtMs, ActorID: n.ActorID,
			Tables: []string{r.table}, Changes: changes})
		_ = enc.Encode(&wire.SubEnd{NextCursor: n.Seq})
	}
	_ = enc.Close()
	return buf.Bytes()
}

// loadRegistrations resolves the client's persisted subscriptions at
// connect (§8.1); revoked ones are not registered.
func (h *Hub) loadRegistrations(ctx context.Context, auth engine.Auth, clientID string, rec store.ClientRecord) []registration {
	if len(rec.Subscriptions) == 0 {
		return nil
	}
	allowed, err := h.cfg.Engine.ResolveAllowed(ctx, auth, clientID)
	var regs []registration
	for _, sub := range rec.Subscriptions {
		requested := scopeMapOf(sub.Scopes)
		eff, active := engine.EffectiveScopes(requested, allowed, err == nil)
		if active {
			regs = append(regs, registration{id: sub.ID, table: sub.Table, effective: eff})
		}
	}
	return regs
}

func scopeMapOf(m map[string][]string) wire.ScopeMap {
	out := make(wire.ScopeMap, 0, len(m))
	for k, v := range m {
		out = append(out, wire.ScopeValues{Key: k, Values: v})
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && wire.CompareKeys(out[j-1].Key, out[j].Key) > 0; j-- {
			out[j-1], out[j] = out[j], out[j-1]
		}
	}
	return out
}
