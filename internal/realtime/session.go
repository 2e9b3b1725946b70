package realtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unique"

	"github.com/gobwas/ws"

	"github.com/syncgo/syncgo/internal/engine"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// wakeCoalesce is the minimum spacing of catch-up wakes on one
// connection; a wake due sooner is sent at the end of the window.
const wakeCoalesce = 50 * time.Millisecond

// maxRoundMissed bounds the commits remembered during a round that did
// not match the registrations; past it, the round end assumes a miss.
const maxRoundMissed = 64

// registration is one subscription registered on a connection: deltas of
// its table inside its effective scopes reach the connection.
type registration struct {
	id        string
	table     string
	effective wire.ScopeMap
	// schemaVersion is the codec the client pulled this subscription with
	// (§9): deltas are projected into its layout.
	schemaVersion int32
}

// session is one connected client.
//
// Locking: part.mu before mu. keys and presence are written with part.mu
// held (keys with mu too), so presence code holding part.mu reads any
// session's keys without taking its mu. Notify takes the mu of each of
// the partition's sessions under part.mu: nothing holds mu across a wait.
type session struct {
	hub      *Hub
	part     *partition
	conn     *wsConn
	id       string
	auth     engine.Auth
	clientID string
	expires  time.Time
	onClose  func() // Conn.OnClose, called by detach
	mu       sync.Mutex
	expiry   *time.Timer // closes the socket when its credentials expire
	starting bool        // attached, hello not sent yet: nothing is delivered
	ended    bool        // end ran: a timer set after it is stopped at once
	epoch    string
	version  uint16
	regs     []registration
	// sig identifies regs+version+epoch for the delta cache; interned, so
	// that the sessions of one subscription share it and a fan-out keys
	// its caches by a pointer.
	sig  unique.Handle[string]
	keys []string // presence scope keys the registrations hold, sorted

	observed int64 // highest notification sequence observed
	// suppressed: behind, wakes instead of deltas until an ack covers
	// observed.
	suppressed    bool
	lastWakeMs    int64
	wakeScheduled bool
	ackPending    bool
	ackCursor     int64
	// subs is the store.SubscriptionsDigest of the subscription list the
	// registrations were made from (the stored one at connect, a round's
	// after it): acks are persisted only while the record stores it.
	subs        uint64
	roundActive bool
	round       *roundState
	// roundMissed holds the commits observed during a round that did not
	// match the registrations: the round's new registrations may match
	// them after the round's pull read the log.
	roundMissed         []engine.CommitNotice
	roundMissedOverflow bool
	// grantGen counts the re-resolutions of the actor's scopes applied to
	// this session: registrations resolved before it moved (at connect, in
	// a round) are resolved once more after they are installed.
	grantGen uint64
	// grant is the latest resolution applied (nil before any).
	grant *grant

	presence map[string]bool // keys this session published on (part.mu)
}

func (s *session) expired(now time.Time) bool {
	return !s.expires.IsZero() && now.After(s.expires)
}

func (s *session) ready() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.starting
}

// regSet is a computed set of registrations, ready to install.
type regSet struct {
	regs    []registration
	version uint16
	sig     unique.Handle[string]
	keys    []string
}

// newRegSet computes the delta-cache signature and the presence keys of
// registrations (§8.6.3: the registered effective scope keys are the
// presence grant).
func (h *Hub) newRegSet(regs []registration, version uint16, epoch string) regSet {
	var keys []string
	schema := h.cfg.Engine.Schema()
	// Every field is written with its length first: ids and scope values
	// may hold any byte but NUL, so a separator alone would let two
	// different registration lists (one value "a\x02b" and the two values
	// "a" and "b") share a signature, and with it a delta.
	var sig strings.Builder
	field := func(s string) {
		sig.WriteString(strconv.Itoa(len(s)))
		sig.WriteByte(':')
		sig.WriteString(s)
	}
	field(strconv.Itoa(int(version)))
	field(epoch)
	field(strconv.Itoa(len(regs)))
	for _, r := range regs {
		field(r.id)
		field(r.table)
		field(strconv.Itoa(int(r.schemaVersion)))
		field(strconv.Itoa(len(r.effective)))
		for _, e := range r.effective {
			field(e.Key)
			field(strconv.Itoa(len(e.Values)))
			for _, v := range e.Values {
				field(v)
			}
		}
		if t, ok := schema.Table(r.table); ok {
			for _, sc := range t.Scopes() {
				for _, e := range r.effective {
					if e.Key == sc.Pattern.Variable {
						for _, v := range e.Values {
							keys = append(keys, sc.Pattern.Key(v))
						}
					}
				}
			}
		}
	}
	slices.Sort(keys)
	return regSet{regs: regs, version: version, sig: unique.Make(sig.String()), keys: slices.Compact(keys)}
}

// installLocked replaces the registrations (at connect, at round end) and
// re-derives the presence grant (§8.6.3). part.mu and mu are held.
func (s *session) installLocked(rs regSet) {
	old := s.keys
	s.regs, s.version, s.sig, s.keys = rs.regs, rs.version, rs.sig, rs.keys
	s.hub.presenceRegistrationChangedLocked(s, old, rs.keys)
}

// sendData queues a frame; a consumer that cannot take it is closed.
func (s *session) sendData(f frame) {
	if err := s.conn.send(f); err == errQueueFull {
		s.hub.stats.closedSlow.Add(1)
		s.conn.closeWith(ws.StatusPolicyViolation, "consumer too slow")
	}
}

// wakeLocked sends a coalescible wake-up (§8.3). Catch-up wakes are spaced
// by wakeCoalesce; one due sooner is sent at the end of the window, so
// the latest commit is never left without a wake. mu is held.
func (s *session) wakeLocked(reason wire.WakeReason) {
	s.sendWakeLocked(reason, s.observed, true)
}

// sendWakeLocked queues a wake-up carrying cursor; spaced says catch-up
// wakes are spaced by wakeCoalesce. mu is held.
func (s *session) sendWakeLocked(reason wire.WakeReason, cursor int64, spaced bool) {
	now := s.hub.cfg.Now()
	if spaced && reason == wire.WakeCatchupRequired && s.lastWakeMs != 0 {
		if wait := s.lastWakeMs + wakeCoalesce.Milliseconds() - now; wait > 0 {
			if !s.wakeScheduled {
				s.wakeScheduled = true
				time.AfterFunc(time.Duration(wait)*time.Millisecond, s.trailingWake)
			}
			return
		}
	}
	s.lastWakeMs = now
	f := textFrame(wire.Wake{Cursor: cursor, Reason: reason, Timestamp: now}.AppendJSON(nil))
	f.prio = prioWake
	s.hub.stats.wakes.Add(1) // before the send: the frame may be on the wire when it returns
	switch err := s.conn.send(f); err {
	case nil:
	case errQueueFull:
		s.hub.stats.wakes.Add(-1)
		s.hub.stats.closedSlow.Add(1)
		s.conn.closeWith(ws.StatusPolicyViolation, "consumer too slow")
	default:
		s.hub.stats.wakes.Add(-1)
	}
}

// trailingWake sends the wake coalesced at the end of a window, if the
// session is still behind.
func (s *session) trailingWake() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wakeScheduled = false
	if s.suppressed {
		s.lastWakeMs = 0
		s.wakeLocked(wire.WakeCatchupRequired)
	}
}

func (s *session) matchesLocked(n engine.CommitNotice) bool {
	for _, r := range s.regs {
		if sectionChanges(r, n.Changes) != nil {
			return true
		}
	}
	return false
}

// deltaCache is what one commit means for every session with the same
// registration signature: whether it matches, and the encoded delta frame
// (encoded once, on first use, and shared).
type deltaCache struct {
	matches bool
	frame   *frame
	err     error // the delta cannot be encoded
	// z is the frame compressed (nil: sent as is), made on the first use
	// by a socket that negotiated permessage-deflate (zdone) and shared.
	z     []byte
	zdone bool
}

// deltaCaches is one fan-out goroutine's handle on a commit's deltaCache
// per registration signature, shared by the goroutines fanning the
// commit out. It remembers the last signature it looked up and that
// entry's frame, so a run of sessions of one subscription (the common
// case: every socket of a fan-out) takes the shared lock once per
// goroutine, not twice per session.
type deltaCaches struct {
	shared *deltaShared // made on first use when nil

	sig    unique.Handle[string]
	dc     *deltaCache // the entry of sig; nil before the first lookup
	frame  *frame
	err    error
	framed bool        // frame and err are dc's
	zdc    *deltaCache // the entry whose compressed frame z is
	z      []byte
}

// deltaShared is the entries of one commit, per registration signature.
type deltaShared struct {
	mu sync.Mutex
	m  map[unique.Handle[string]]*deltaCache
}

// lookup returns the entry of s's registration signature, deciding on
// first use whether the commit matches it. s.mu is held.
func (c *deltaCaches) lookup(s *session, n engine.CommitNotice) *deltaCache {
	if c.dc != nil && c.sig == s.sig {
		return c.dc
	}
	if c.shared == nil {
		c.shared = &deltaShared{}
	}
	sh := c.shared
	sh.mu.Lock()
	if sh.m == nil {
		sh.m = map[unique.Handle[string]]*deltaCache{}
	}
	dc := sh.m[s.sig]
	if dc == nil {
		dc = &deltaCache{matches: s.matchesLocked(n)}
		sh.m[s.sig] = dc
	}
	sh.mu.Unlock()
	c.sig, c.dc, c.frame, c.err, c.framed = s.sig, dc, nil, nil, false
	return dc
}

// frameFor returns the entry's delta frame, encoded on first use with s's
// registrations (every session of the signature has the same). dc is the
// entry lookup just returned for s. s.mu is held.
func (c *deltaCaches) frameFor(s *session, n engine.CommitNotice, dc *deltaCache) (*frame, error) {
	if c.framed && c.dc == dc {
		return c.frame, c.err
	}
	sh := c.shared
	sh.mu.Lock()
	if dc.frame == nil && dc.err == nil {
		b, err := encodeDelta(s.hub.cfg.Engine, n, s.regs, s.version, s.epoch)
		if err != nil {
			dc.err = err
			s.hub.cfg.Logger.Error("realtime delta cannot be encoded; sending a wake-up",
				"partition", n.Partition, "commitSeq", n.Seq, "err", err)
		} else {
			f := binaryFrame(b)
			dc.frame = &f
		}
	}
	f, err := dc.frame, dc.err
	sh.mu.Unlock()
	if c.dc == dc {
		c.frame, c.err, c.framed = f, err, true
	}
	return f, err
}

// compressedFor returns the entry's delta frame f compressed, compressed
// on first use and shared by every socket that negotiated
// permessage-deflate (nil: the frame goes as it is). s.mu is held.
func (c *deltaCaches) compressedFor(s *session, dc *deltaCache, f frame) []byte {
	if c.zdc == dc {
		return c.z
	}
	sh := c.shared
	sh.mu.Lock()
	if !dc.zdone {
		dc.z = s.conn.z.compress(ws.OpBinary, payloadOf(f.b))
		dc.zdone = true
	}
	z := dc.z
	sh.mu.Unlock()
	c.zdc, c.z = dc, z
	return z
}

// roundCommitLocked takes the in-round path (§8.7 interleaving) for a
// commit notified while this session's round response is in flight: a
// commit matching the registrations suppresses deltas and is answered
// with a catch-up wake-up at once — queued before the round's END, so a
// client that pushed in the round sees it and runs another round — and
// one that does not match is remembered for the round end check. mu is
// held; the round is active.
func (s *session) roundCommitLocked(n engine.CommitNotice, matches bool) {
	if !matches {
		if len(s.roundMissed) < maxRoundMissed {
			s.roundMissed = append(s.roundMissed, n)
		} else {
			s.roundMissedOverflow = true
		}
		return
	}
	s.hub.stats.dropsInRound.Add(1)
	s.suppressed = true
	s.sendWakeLocked(wire.WakeCatchupRequired, max(s.observed, n.Seq), false)
}

// deliver handles one commit notification for this session (§8.2).
// Notifications reach a session one at a time, in partition order.
func (s *session) deliver(n engine.CommitNotice, cache *deltaCaches) {
	s.deliverMarked(n, cache, false, false)
}

// deliverMarked is deliver with what Notify decided for this session:
// inRound when the commit was notified during its round (taken through
// roundCommitLocked then), woke when it matched and the session was woken.
// Such a commit is never a delta, whenever the fan-out reaches the session:
// before its round's END or after it.
func (s *session) deliverMarked(n engine.CommitNotice, cache *deltaCaches, inRound, woke bool) {
	h := s.hub
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.starting {
		// Attach has not read the partition yet: its hello covers this.
		s.observed = max(s.observed, n.Seq)
		return
	}
	if n.Seq <= s.observed {
		return
	}
	gap := n.Seq != s.observed+1
	s.observed = n.Seq
	if inRound {
		switch {
		case gap:
			// The missing notification may have matched (§8.2).
			s.suppressed = true
			s.wakeLocked(wire.WakeCatchupRequired)
		case woke && !s.suppressed:
			// An ack lifted the suppression without covering this
			// commit: the client still lacks it.
			h.stats.dropsInRound.Add(1)
			s.suppressed = true
			s.wakeLocked(wire.WakeCatchupRequired)
		}
		return
	}
	dc := cache.lookup(s, n)
	if !dc.matches {
		if s.roundActive {
			if len(s.roundMissed) < maxRoundMissed {
				s.roundMissed = append(s.roundMissed, n)
			} else {
				s.roundMissedOverflow = true
			}
		}
		if gap {
			// The missing notification may have matched (§8.2: a
			// non-adjacent notification is answered with a wake).
			s.suppressed = true
			s.wakeLocked(wire.WakeCatchupRequired)
		}
		return
	}
	switch {
	case s.roundActive:
		h.stats.dropsInRound.Add(1)
	case s.suppressed, gap:
		h.stats.dropsBehind.Add(1)
	default:
		df, derr := cache.frameFor(s, n, dc)
		if derr != nil {
			// Never a delta with a section left out, never a skipped
			// commit: the client pulls it (and the pull reports it).
			h.stats.dropsUnencodable.Add(1)
			s.suppressed = true
			s.wakeLocked(wire.WakeCatchupRequired)
			return
		}
		f := *df
		if len(f.b) > h.cfg.MaxDeltaBytes {
			h.stats.dropsTooLarge.Add(1)
			s.suppressed = true
			s.wakeLocked(wire.WakeDeltaTooLarge)
			return
		}
		if s.conn.z != nil {
			f.z = cache.compressedFor(s, dc, f)
		}
		// Counted before the send: the frame may be on the wire when
		// send returns.
		h.stats.deltas.Add(1)
		switch err := s.conn.send(f); err {
		case nil:
			return
		case errQueueFull:
			h.stats.deltas.Add(-1)
			h.stats.dropsQueueFull.Add(1)
		default:
			h.stats.deltas.Add(-1)
			return // closed
		}
	}
	s.suppressed = true
	s.wakeLocked(wire.WakeCatchupRequired)
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
		s.ackCursor = cursor
	}
	s.ackPending = true
}

// takeAck returns the acknowledged cursor to persist, as an advance of
// the client's record under the log epoch and subscription list it
// belongs to.
func (s *session) takeAck(atMs int64) (store.CursorAdvance, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ackPending {
		return store.CursorAdvance{}, false
	}
	s.ackPending = false
	return store.CursorAdvance{ClientID: s.clientID, ActorID: s.auth.ActorID, LogEpoch: s.epoch,
		Cursor: s.ackCursor, AtMs: atMs, Subscriptions: s.subs}, true
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
// registration. Any frame that cannot be encoded, or a section whose rows
// an older client's layout cannot hold, fails the whole delta: a delta
// with a section left out would still advance the client past the
// commit, so the caller sends a wake-up instead.
func encodeDelta(eng *engine.Engine, n engine.CommitNotice, regs []registration, version uint16, epoch string) ([]byte, error) {
	schemaVersion := eng.Schema().Version()
	var buf bytes.Buffer
	buf.WriteByte(wire.ChannelTagDelta)
	enc, err := wire.NewEncoder(&buf, wire.KindResponse, version)
	if err != nil {
		return nil, err
	}
	hdr := &wire.RespHeader{LatestSchemaVersion: &schemaVersion}
	if version >= wire.Version2 {
		hdr.LogEpoch = epoch
	}
	if err := enc.Encode(hdr); err != nil {
		return nil, err
	}
	for _, r := range regs {
		changes := sectionChanges(r, n.Changes)
		if changes == nil {
			continue
		}
		if r.schemaVersion != schemaVersion {
			if changes, err = narrowChanges(eng, r, changes); err != nil {
				return nil, err
			}
		}
		err := errors.Join(
			enc.Encode(&wire.SubStart{ID: r.id, Status: wire.SubActive, EffectiveScopes: r.effective}),
			enc.Encode(&wire.Commit{CommitSeq: n.Seq, CreatedAtMs: n.CreatedAtMs, ActorID: engine.WireActorID(n.ActorID),
				Tables: []string{r.table}, Changes: changes}),
			enc.Encode(&wire.SubEnd{NextCursor: n.Seq}))
		if err != nil {
			return nil, fmt.Errorf("subscription %q: %w", r.id, err)
		}
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// narrowChanges projects change rows into an older client's layout (§9);
// an error when the rows cannot be projected (the delta becomes a wake,
// and the client's pull repairs it).
func narrowChanges(eng *engine.Engine, r registration, changes []wire.Change) ([]wire.Change, error) {
	out := make([]wire.Change, len(changes))
	for i, ch := range changes {
		out[i] = ch
		if ch.Row == nil {
			continue
		}
		row, err := eng.NarrowPayload(r.table, r.schemaVersion, ch.Row)
		if err != nil {
			return nil, fmt.Errorf("subscription %q: narrowing to schema %d: %w", r.id, r.schemaVersion, err)
		}
		out[i].Row = row
	}
	return out, nil
}

// loadRegistrations resolves the client's persisted subscriptions at
// connect (§8.1); revoked ones are not registered.
func (h *Hub) loadRegistrations(ctx context.Context, auth engine.Auth, clientID string, rec store.ClientRecord) []registration {
	if len(rec.Subscriptions) == 0 {
		return nil
	}
	allowed, err := h.cfg.Engine.ResolveAllowed(ctx, auth, clientID)
	current := h.cfg.Engine.Schema().Version()
	var regs []registration
	for _, sub := range rec.Subscriptions {
		version := sub.SchemaVersion
		if version == 0 {
			if h.cfg.Engine.HasWindow() {
				// A legacy record on a window host names no codec: it
				// registers nothing until a new pull records one (§9).
				continue
			}
			version = current
		}
		if !h.cfg.Engine.ServesTable(version, sub.Table) {
			continue
		}
		requested := scopeMapOf(sub.Scopes)
		eff, active := engine.EffectiveScopes(requested, allowed, err == nil)
		if active {
			regs = append(regs, registration{id: sub.ID, table: sub.Table, effective: eff, schemaVersion: version})
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
