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

// presenceEntry is one connection's document on a scope key.
type presenceEntry struct {
	doc json.RawMessage
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
		h.leaveLocked(s, m.ScopeKey)
		return
	}
	if len(m.Doc) > h.cfg.MaxPresenceBytes {
		s.sendData(textFrame(wire.PresenceError{ScopeKey: m.ScopeKey, Code: wire.PresenceTooLarge, Timestamp: now}.AppendJSON(nil)))
		return
	}
	peers := p.presence[m.ScopeKey]
	if peers == nil {
		peers = map[*session]presenceEntry{}
		p.presence[m.ScopeKey] = peers
	}
	_, had := peers[s]
	peers[s] = presenceEntry{doc: append(json.RawMessage(nil), m.Doc...)}
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
	h.fanPresenceLocked(p, m.ScopeKey, s, f)
}

// fanPresenceLocked queues f on the other sessions registered on key.
// p.mu is held.
func (h *Hub) fanPresenceLocked(p *partition, key string, except *session, f frame) {
	for s := range p.sessions {
		if s != except && hasKey(s.keys, key) {
			s.sendData(f)
		}
	}
}

// leaveLocked removes a session's document on key and tells the
// scope-mates. p.mu is held.
func (h *Hub) leaveLocked(s *session, key string) {
	p := s.part
	peers := p.presence[key]
	if _, ok := peers[s]; !ok {
		return
	}
	delete(peers, s)
	if len(peers) == 0 {
		delete(p.presence, key)
	}
	delete(s.presence, key)
	f := textFrame(wire.PresenceFanout{ScopeKey: key, Kind: wire.PresenceLeave, ActorID: s.auth.ActorID,
		ClientID: s.clientID, Timestamp: h.cfg.Now()}.AppendJSON(nil))
	h.fanPresenceLocked(p, key, s, f)
}

// presenceRegistrationChangedLocked re-derives presence when a session's
// keys change (§8.6.3): keys lost drop its documents there; keys gained
// get the snapshot of the peers already present. p.mu is held.
func (h *Hub) presenceRegistrationChangedLocked(s *session, old, now []string) {
	for _, k := range old {
		if !hasKey(now, k) {
			h.leaveLocked(s, k)
		}
	}
	ts := h.cfg.Now()
	p := s.part
	for _, k := range now {
		if hasKey(old, k) {
			continue
		}
		for peer, e := range p.presence[k] {
			if peer == s {
				continue
			}
			s.sendData(textFrame(wire.PresenceFanout{ScopeKey: k, Kind: wire.PresenceJoin,
				ActorID: peer.auth.ActorID, ClientID: peer.clientID, Doc: e.doc, Timestamp: ts}.AppendJSON(nil)))
		}
	}
}

// dropPresenceLocked leaves every key a closing session was present on.
// p.mu is held.
func (h *Hub) dropPresenceLocked(s *session) {
	for k := range s.presence {
		h.leaveLocked(s, k)
	}
}
