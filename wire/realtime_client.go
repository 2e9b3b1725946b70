package wire

import (
	"encoding/json"
	"strconv"
)

// ClientMessage is a client→server realtime control message (§8): an [Ack],
// a [PresencePublish] or an [UnknownClientMessage]. Every implementation is
// also a json.Marshaler that validates before encoding.
type ClientMessage interface {
	json.Marshaler
	// MessageName returns the message's discriminator value: "ack",
	// "presence", or the unknown message's name.
	MessageName() string
	// AppendJSON appends the message as compact JSON in the spec's field
	// order. It does not validate; MarshalJSON does.
	AppendJSON(dst []byte) []byte
	isClientMessage()
}

// AppendClientMessage appends m as compact JSON to dst; see
// ClientMessage.AppendJSON.
func AppendClientMessage(dst []byte, m ClientMessage) []byte { return m.AppendJSON(dst) }

// Ack acknowledges applied deltas, {"type":"ack","cursor":n} (§8.2).
type Ack struct {
	Cursor int64 // the highest contiguously applied commitSeq
}

// PresencePublish publishes the connection's presence document on ScopeKey
// or, with a nil Doc, leaves the key: doc null (§8.6.2). Unlike the ack it
// is discriminated by "event":"presence".
type PresencePublish struct {
	ScopeKey string
	Doc      json.RawMessage // a JSON object, or nil to leave; parsed docs are compacted
}

// IsLeave reports whether p clears the connection's document (doc null).
func (p PresencePublish) IsLeave() bool { return len(p.Doc) == 0 }

// UnknownClientMessage is a client→server message that §8 does not define:
// a string "event" other than presence, or a string "type" other than ack.
// Key is "event" or "type", whichever named it; Raw is the whole message,
// compacted.
type UnknownClientMessage struct {
	Key  string
	Name string
	Raw  json.RawMessage
}

// ParseClientMessage parses one client→server control message. As in the
// reference server, "event":"presence" selects a presence publish and
// otherwise "type":"ack" selects an ack; any other string "event" or
// "type" yields an [UnknownClientMessage] and no error. Everything else —
// not a UTF-8 JSON object, no string discriminator, an ack whose cursor is
// not an integer within ±(2^53−1), a publish whose scopeKey is not a
// non-empty string or whose doc is neither an object nor null — is a
// *DecodeError with Code sync.invalid_request. The reference server
// silently ignores malformed acks and unparsable text but closes the
// connection on a malformed presence message; that policy is the caller's.
func ParseClientMessage(b []byte) (ClientMessage, error) {
	root := rtParseRoot(b, "client message")
	if root.err != nil {
		return nil, root.err
	}
	event, isEvent := root.optStr("event")
	typ, isType := root.optStr("type")
	switch {
	case isEvent && event == "presence":
		d := root.object("data", "presence.data")
		p := PresencePublish{ScopeKey: d.str("scopeKey")}
		if d.err == nil && p.ScopeKey == "" {
			d.fail("scopeKey must be non-empty")
		}
		p.Doc = d.doc("doc", true)
		if d.err != nil {
			return nil, d.err
		}
		return p, nil
	case isType && typ == "ack":
		a := Ack{Cursor: root.integer("cursor")}
		if root.err != nil {
			return nil, root.err
		}
		return a, nil
	case isEvent:
		return UnknownClientMessage{Key: "event", Name: event, Raw: rtCompact(b)}, nil
	case isType:
		return UnknownClientMessage{Key: "type", Name: typ, Raw: rtCompact(b)}, nil
	}
	root.fail("no string event or type")
	return nil, root.err
}

func (Ack) isClientMessage()                  {}
func (PresencePublish) isClientMessage()      {}
func (UnknownClientMessage) isClientMessage() {}

// MessageName returns "ack".
func (Ack) MessageName() string { return "ack" }

// MessageName returns "presence".
func (PresencePublish) MessageName() string { return "presence" }

// MessageName returns the unknown message's name.
func (m UnknownClientMessage) MessageName() string { return m.Name }

// AppendJSON appends the ack as compact JSON.
func (a Ack) AppendJSON(dst []byte) []byte {
	dst = strconv.AppendInt(append(dst, `{"type":"ack","cursor":`...), a.Cursor, 10)
	return append(dst, '}')
}

// AppendJSON appends the publish as compact JSON, doc null for a leave.
func (p PresencePublish) AppendJSON(dst []byte) []byte {
	dst = appendJSString(append(dst, `{"event":"presence","data":{"scopeKey":`...), p.ScopeKey)
	dst = rtAppendDoc(append(dst, `,"doc":`...), p.Doc)
	return append(dst, "}}"...)
}

// AppendJSON appends Raw verbatim.
func (m UnknownClientMessage) AppendJSON(dst []byte) []byte { return append(dst, m.Raw...) }

// MarshalJSON encodes a, refusing a cursor outside ±(2^53−1).
func (a Ack) MarshalJSON() ([]byte, error) {
	return rtMarshal(a, rtCheckInt("ack.cursor", a.Cursor, nil))
}

// MarshalJSON encodes p, refusing an empty scope key or a Doc that is
// neither empty nor a JSON object.
func (p PresencePublish) MarshalJSON() ([]byte, error) {
	var err *EncodeError
	switch {
	case p.ScopeKey == "":
		err = encodeErrorf("presence.scopeKey: empty")
	case !p.IsLeave() && !rtValidDoc(p.Doc):
		err = encodeErrorf("presence.doc: not a JSON object")
	}
	return rtMarshal(p, err)
}

// MarshalJSON returns a copy of Raw, refusing it if it is not a JSON object.
func (m UnknownClientMessage) MarshalJSON() ([]byte, error) {
	if !rtValidDoc(m.Raw) {
		return nil, encodeErrorf("unknown %s %q: raw message is not a JSON object", m.Key, m.Name)
	}
	return m.AppendJSON(nil), nil
}
