package realtime

import (
	"encoding/json"

	"github.com/syncgo/syncgo/wire"
)

// presenceEntry is one connection's document on a scope key.
type presenceEntry struct {
	doc json.RawMessage
}

// publish handles a client presence message (§8.6): authorization by the
// connection's registrations, the size cap, then fan-out to scope-mates.
func (h *Hub) publish(s *session, m wire.PresencePublish) {
	now := h.cfg.Now()
	s.mu.Lock()
	held := s.keys[m.ScopeKey]
	s.mu.Unlock()
	if !held {
		s.sendData(textFrame(wire.PresenceError{ScopeKey: m.ScopeKey, Code: wire.PresenceForbidden, Timestamp: now}.AppendJSON(nil)))
		return
	}
	if m.IsLeave() {
		h.leave(s, m.ScopeKey)
		return
	}
	if len(m.Doc) > h.cfg.MaxPresenceBytes {
		s.sendData(textFrame(wire.PresenceError{ScopeKey: m.ScopeKey, Code: wire.PresenceTooLarge, Timestamp: now}.AppendJSON(nil)))
		return
	}
	p := s.part
	p.mu.Lock()
	peers := p.presence[m.ScopeKey]
	if peers == nil {
		peers = map[*session]presenceEntry{}
		p.presence[m.ScopeKey] = peers
	}
	_, had := peers[s]
	peers[s] = presenceEntry{doc: append(json.RawMessage(nil), m.Doc...)}
	mates := h.scopeMates(p, m.ScopeKey, s)
	p.mu.Unlock()
	s.mu.Lock()
	if s.presence == nil {
		s.presence = map[string]bool{}
	}
	s.presence[m.ScopeKey] = true
	s.mu.Unlock()
	kind := wire.PresenceJoin
	if had {
		kind = wire.PresenceUpdate
	}
	f := textFrame(wire.PresenceFanout{ScopeKey: m.ScopeKey, Kind: kind, ActorID: s.auth.ActorID,
		ClientID: s.clientID, Doc: m.Doc, Timestamp: now}.AppendJSON(nil))
	for _, mate := range mates {
		mate.sendData(f)
	}
}

// scopeMates lists the other sessions registered on key. p.mu is held.
func (h *Hub) scopeMates(p *partition, key string, except *session) []*session {
	var out []*session
	for s := range p.sessions {
		if s == except {
			continue
		}
		s.mu.Lock()
		held := s.keys[key]
		s.mu.Unlock()
		if held {
			out = append(out, s)
		}
	}
	return out
}

// leave removes a session's document on key and tells the scope-mates.
func (h *Hub) leave(s *session, key string) {
	p := s.part
	p.mu.Lock()
	peers := p.presence[key]
	if _, ok := peers[s]; !ok {
		p.mu.Unlock()
		return
	}
	delete(peers, s)
	if len(peers) == 0 {
		delete(p.presence, key)
	}
	mates := h.scopeMates(p, key, s)
	p.mu.Unlock()
	s.mu.Lock()
	delete(s.presence, key)
	s.mu.Unlock()
	f := textFrame(wire.PresenceFanout{ScopeKey: key, Kind: wire.PresenceLeave, ActorID: s.auth.ActorID,
		ClientID: s.clientID, Timestamp: h.cfg.Now()}.AppendJSON(nil))
	for _, mate := range mates {
		mate.sendData(f)
	}
}

// presenceRegistrationChanged re-derives presence when a session's keys
// change (§8.6.3): keys lost drop its documents there; keys gained get the
// snapshot of the peers already present.
func (h *Hub) presenceRegistrationChanged(s *session, old, now map[string]bool) {
	if s.part == nil {
		return
	}
	for k := range old {
		if !now[k] {
			h.leave(s, k)
		}
	}
	ts := h.cfg.Now()
	for k := range now {
		if old[k] {
			continue
		}
		p := s.part
		p.mu.Lock()
		var burst []frame
		for peer, e := range p.presence[k] {
			if peer == s {
				continue
			}
			burst = append(burst, textFrame(wire.PresenceFanout{ScopeKey: k, Kind: wire.PresenceJoin,
				ActorID: peer.auth.ActorID, ClientID: peer.clientID, Doc: e.doc, Timestamp: ts}.AppendJSON(nil)))
		}
		p.mu.Unlock()
		for _, f := range burst {
			s.sendData(f)
		}
	}
}

// dropPresence leaves every key a closing session was present on.
func (h *Hub) dropPresence(s *session) {
	s.mu.Lock()
	keys := make([]string, 0, len(s.presence))
	for k := range s.presence {
		keys = append(keys, k)
	}
	s.mu.Unlock()
	for _, k := range keys {
		h.leave(s, k)
	}
}
