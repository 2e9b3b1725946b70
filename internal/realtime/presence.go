package realtime

import (
	"encoding/json"
	"slices"

	"github.com/syncgo/syncgo/wire"
)

// hasKey reports whether the sorted keys hold k.
func hasKey(keys []string, k string) bool {
	_, ok := slices.BinarySearch(keys, k)
	return ok
}

// peerID is a presence document's identity (§8.6.1): the publishing
// connection's (actorId, clientId). The same client reconnecting, while
// its old socket is still open or half-open, is the same peer and
// replaces its own document. A connection without a client id is a peer
// of its own.
type peerID struct {
	actor, client string
	anon          *session
}

func peerOf(s *session) peerID {
	if s.clientID == "" {
		return peerID{actor: s.auth.ActorID, anon: s}
	}
	return peerID{actor: s.auth.ActorID, client: s.clientID}
}

// presenceEntry is one peer's document on a scope key, and the connection
// that published it last (the one whose close or leave removes it).
type presenceEntry struct {
	doc   json.RawMessage
	owner *session
}

// Presence state lives under the partition's mutex, and fan-out frames are
// queued while it is held: every connection sees one key's changes in the
// order they were applied, and a snapshot never races a change.

// publish handles a client presence message (§8.6): authorization by the
// connection's registrations, the size cap, then fan-out to scope-mates.
func (h *Hub) publish(s *session, m wire.PresencePublish) {
	now := h.cfg.Now()
	p := s.part
	p.mu.Lock()
	defer p.mu.Unlock()
	if !hasKey(s.keys, m.ScopeKey) {
		s.sendData(textFrame(wire.PresenceError{ScopeKey: m.ScopeKey, Code: wire.PresenceForbidden, Timestamp: now}.AppendJSON(nil)))
		return
	}
	if m.IsLeave() {
		h.leaveLocked(s, m.ScopeKey, true)
		return
	}
	if len(m.Doc) > h.cfg.MaxPresenceBytes {
		s.sendData(textFrame(wire.PresenceError{ScopeKey: m.ScopeKey, Code: wire.PresenceTooLarge, Timestamp: now}.AppendJSON(nil)))
		return
	}
	peers := p.presence[m.ScopeKey]
	if peers == nil {
		peers = map[peerID]presenceEntry{}
		p.presence[m.ScopeKey] = peers
	}
	id := peerOf(s)
	prev, had := peers[id]
	if had && prev.owner != s {
		// The same client on a new connection: the document moves to it,
		// and the old connection's close no longer says leave.
		delete(prev.owner.presence, m.ScopeKey)
	}
	peers[id] = presenceEntry{doc: append(json.RawMessage(nil), m.Doc...), owner: s}
	if s.presence == nil {
		s.presence = map[string]bool{}
	}
	s.presence[m.ScopeKey] = true
	kind := wire.PresenceJoin
	if had {
		kind = wire.PresenceUpdate
	}
	f := textFrame(wire.PresenceFanout{ScopeKey: m.ScopeKey, Kind: kind, ActorID: s.auth.ActorID,
		ClientID: s.clientID, Doc: m.Doc, Timestamp: now}.AppendJSON(nil))
	h.fanPresenceLocked(p, m.ScopeKey, id, f)
}

// fanPresenceLocked queues f, a change of peer from's document, on the
// sessions registered on key, except from's own (a publisher does not
// receive its own fanout, on any of its connections). p.mu is held.
func (h *Hub) fanPresenceLocked(p *partition, key string, from peerID, f frame) {
	for s := range p.sessions {
		if hasKey(s.keys, key) && peerOf(s) != from {
			s.sendData(f)
		}
	}
}

// leaveLocked removes the peer's document on key and tells the
// scope-mates. A session that closes or loses the key removes only a
// document it published last; an explicit leave (doc null, cleared)
// removes the peer's document whichever of its connections published
// it. p.mu is held.
func (h *Hub) leaveLocked(s *session, key string, cleared bool) {
	p := s.part
	delete(s.presence, key)
	peers := p.presence[key]
	id := peerOf(s)
	e, ok := peers[id]
	if !ok || (e.owner != s && !cleared) {
		return
	}
	if e.owner != s {
		delete(e.owner.presence, key)
	}
	delete(peers, id)
	if len(peers) == 0 {
		delete(p.presence, key)
	}
	f := textFrame(wire.PresenceFanout{ScopeKey: key, Kind: wire.PresenceLeave, ActorID: s.auth.ActorID,
		ClientID: s.clientID, Timestamp: h.cfg.Now()}.AppendJSON(nil))
	h.fanPresenceLocked(p, key, id, f)
}

// presenceRegistrationChangedLocked re-derives presence when a session's
// keys change (§8.6.3): keys lost drop its documents there; keys gained
// get the snapshot of the peers already present. p.mu is held.
func (h *Hub) presenceRegistrationChangedLocked(s *session, old, now []string) {
	for _, k := range old {
		if !hasKey(now, k) {
			h.leaveLocked(s, k, false)
		}
	}
	ts := h.cfg.Now()
	p := s.part
	for _, k := range now {
		if hasKey(old, k) {
			continue
		}
		self := peerOf(s)
		for peer, e := range p.presence[k] {
			if peer == self {
				continue
			}
			s.sendData(textFrame(wire.PresenceFanout{ScopeKey: k, Kind: wire.PresenceJoin,
				ActorID: peer.actor, ClientID: peer.client, Doc: e.doc, Timestamp: ts}.AppendJSON(nil)))
		}
	}
}

// dropPresenceLocked leaves every key a closing session was present on.
// p.mu is held.
func (h *Hub) dropPresenceLocked(s *session) {
	for k := range s.presence {
		h.leaveLocked(s, k, false)
	}
}
