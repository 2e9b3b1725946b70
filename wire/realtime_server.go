package wire

import (
	"encoding/json"
	"strconv"
)

// ServerEvent is a server→client realtime control message (§8): one of
// [Hello], [Wake], [Heartbeat], [PresenceFanout], [PresenceError] or
// [UnknownEvent]. Every implementation is also a json.Marshaler that
// validates before encoding.
type ServerEvent interface {
	json.Marshaler
	// EventName returns the value of the message's "event" key.
	EventName() string
	// AppendJSON appends the message as compact JSON, fields in the
	// order of the spec's shapes and the golden vectors. It does not
	// validate; MarshalJSON does.
	AppendJSON(dst []byte) []byte
	isServerEvent()
}

// AppendServerEvent appends ev as compact JSON to dst; see
// ServerEvent.AppendJSON. With a reused dst it does not allocate.
func AppendServerEvent(dst []byte, ev ServerEvent) []byte { return ev.AppendJSON(dst) }

// Hello is the handshake event sent on connect (§8.1).
type Hello struct {
	ProtocolVersion int64 // RealtimeProtocolVersion
	SessionID       string
	ActorID         string
	ClientID        string
	Cursor          int64 // the client's last acknowledged cursor
	LatestCursor    int64 // the server's latest commitSeq
	RequiresSync    bool
	Timestamp       int64 // epoch ms
}

// Wake is the wake-up event, "event":"sync" (§8.3). Its requiresPull is
// always the literal true, so it has no field.
type Wake struct {
	Cursor    int64 // the server's latest commitSeq
	Reason    WakeReason
	Timestamp int64 // epoch ms
}

// Heartbeat is the keep-alive event (§8.5).
type Heartbeat struct {
	Timestamp int64 // epoch ms
}

// PresenceFanout tells a connection that a scope-mate's presence on
// ScopeKey changed (§8.6.2). Doc is the peer's document, a JSON object,
// for join and update; a leave carries no document: it encodes doc null
// whatever Doc holds, and parses with a nil Doc.
type PresenceFanout struct {
	ScopeKey  string
	Kind      PresenceKind
	ActorID   string
	ClientID  string
	Doc       json.RawMessage // written verbatim; parsed docs are compacted
	Timestamp int64           // epoch ms
}

// PresenceError rejects a presence publish, sent to the publisher only
// (§8.6.2). Code is PresenceTooLarge or PresenceForbidden.
type PresenceError struct {
	ScopeKey  string
	Code      string
	Timestamp int64 // epoch ms
}

// UnknownEvent is a server→client event whose name §8 does not define. A
// client tolerates and ignores it (§8.1). Raw is the whole message,
// compacted; AppendJSON writes it back verbatim.
type UnknownEvent struct {
	Name string
	Raw  json.RawMessage
}

// ParseServerEvent parses one server→client control message (§8.1). An
// event name §8 does not define yields an [UnknownEvent] and no error. A
// message that is not a UTF-8 JSON object with a string "event", or a known
// event whose data is missing or wrong-shaped, is a *DecodeError with Code
// sync.invalid_request. Numbers must be integers within ±(2^53−1); members
// the shapes do not list are ignored, as JSON.parse-based readers ignore
// them. Unlike the reference parsers, a presence event must carry kind or
// error, a fanout or error must carry its timestamp, and a leave must carry
// doc null: the §8.6.2 shapes, exactly.
func ParseServerEvent(b []byte) (ServerEvent, error) {
	root := rtParseRoot(b, "server event")
	name := root.str("event")
	if root.err != nil {
		return nil, root.err
	}
	var ev ServerEvent
	var d *rtObject
	switch name {
	case "hello":
		d = root.object("data", "hello.data")
		ev = Hello{
			ProtocolVersion: d.integer("protocolVersion"),
			SessionID:       d.str("sessionId"),
			ActorID:         d.str("actorId"),
			ClientID:        d.str("clientId"),
			Cursor:          d.integer("cursor"),
			LatestCursor:    d.integer("latestCursor"),
			RequiresSync:    d.boolean("requiresSync"),
			Timestamp:       d.integer("timestamp"),
		}
	case "sync":
		d = root.object("data", "sync.data")
		w := Wake{Cursor: d.integer("cursor")}
		if d.err == nil && string(d.raw("requiresPull")) != "true" {
			d.fail("requiresPull must be the literal true")
		}
		reason := d.str("reason")
		if d.err == nil {
			var ok bool
			if w.Reason, ok = ParseWakeReason(reason); !ok {
				d.fail("unknown wake reason %q", reason)
			}
		}
		w.Timestamp = d.integer("timestamp")
		ev = w
	case "heartbeat":
		d = root.object("data", "heartbeat.data")
		ev = Heartbeat{Timestamp: d.integer("timestamp")}
	case "presence":
		d = root.object("data", "presence.data")
		ev = parsePresenceEvent(d)
	default:
		return UnknownEvent{Name: name, Raw: rtCompact(b)}, nil
	}
	if d.err != nil {
		return nil, d.err
	}
	return ev, nil
}

func parsePresenceEvent(d *rtObject) ServerEvent {
	scopeKey := d.str("scopeKey")
	if d.err == nil && scopeKey == "" {
		d.fail("scopeKey must be non-empty")
	}
	if d.has("error") {
		return PresenceError{ScopeKey: scopeKey, Code: d.str("error"), Timestamp: d.integer("timestamp")}
	}
	if !d.has("kind") {
		d.fail("a server presence event carries kind or error")
		return nil
	}
	f := PresenceFanout{ScopeKey: scopeKey}
	kind := d.str("kind")
	if d.err == nil {
		var ok bool
		if f.Kind, ok = ParsePresenceKind(kind); !ok {
			d.fail("unknown presence kind %q", kind)
		}
	}
	f.ActorID = d.str("actorId")
	f.ClientID = d.str("clientId")
	if f.Kind == PresenceLeave {
		if d.doc("doc", true) != nil {
			d.fail("a presence leave must carry doc null")
		}
	} else {
		f.Doc = d.doc("doc", false)
	}
	f.Timestamp = d.integer("timestamp")
	return f
}

func (Hello) isServerEvent()          {}
func (Wake) isServerEvent()           {}
func (Heartbeat) isServerEvent()      {}
func (PresenceFanout) isServerEvent() {}
func (PresenceError) isServerEvent()  {}
func (UnknownEvent) isServerEvent()   {}

// EventName returns "hello".
func (Hello) EventName() string { return "hello" }

// EventName returns "sync".
func (Wake) EventName() string { return "sync" }

// EventName returns "heartbeat".
func (Heartbeat) EventName() string { return "heartbeat" }

// EventName returns "presence".
func (PresenceFanout) EventName() string { return "presence" }

// EventName returns "presence".
func (PresenceError) EventName() string { return "presence" }

// EventName returns the unknown event's name.
func (e UnknownEvent) EventName() string { return e.Name }

// AppendJSON appends the hello event as compact JSON.
func (h Hello) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"event":"hello","data":{"protocolVersion":`...)
	dst = strconv.AppendInt(dst, h.ProtocolVersion, 10)
	dst = appendJSString(append(dst, `,"sessionId":`...), h.SessionID)
	dst = appendJSString(append(dst, `,"actorId":`...), h.ActorID)
	dst = appendJSString(append(dst, `,"clientId":`...), h.ClientID)
	dst = strconv.AppendInt(append(dst, `,"cursor":`...), h.Cursor, 10)
	dst = strconv.AppendInt(append(dst, `,"latestCursor":`...), h.LatestCursor, 10)
	dst = strconv.AppendBool(append(dst, `,"requiresSync":`...), h.RequiresSync)
	dst = strconv.AppendInt(append(dst, `,"timestamp":`...), h.Timestamp, 10)
	return append(dst, "}}"...)
}

// AppendJSON appends the wake-up as compact JSON.
func (w Wake) AppendJSON(dst []byte) []byte {
	dst = strconv.AppendInt(append(dst, `{"event":"sync","data":{"cursor":`...), w.Cursor, 10)
	dst = append(dst, `,"requiresPull":true,"reason":"`...)
	dst = append(dst, w.Reason.String()...)
	dst = strconv.AppendInt(append(dst, `","timestamp":`...), w.Timestamp, 10)
	return append(dst, "}}"...)
}

// AppendJSON appends the heartbeat as compact JSON.
func (h Heartbeat) AppendJSON(dst []byte) []byte {
	dst = strconv.AppendInt(append(dst, `{"event":"heartbeat","data":{"timestamp":`...), h.Timestamp, 10)
	return append(dst, "}}"...)
}

// AppendJSON appends the fanout as compact JSON; a leave always writes doc
// null.
func (p PresenceFanout) AppendJSON(dst []byte) []byte {
	dst = appendJSString(append(dst, `{"event":"presence","data":{"scopeKey":`...), p.ScopeKey)
	dst = append(dst, `,"kind":"`...)
	dst = append(dst, p.Kind.String()...)
	dst = appendJSString(append(dst, `","actorId":`...), p.ActorID)
	dst = appendJSString(append(dst, `,"clientId":`...), p.ClientID)
	dst = append(dst, `,"doc":`...)
	if p.Kind == PresenceLeave {
		dst = append(dst, "null"...)
	} else {
		dst = rtAppendDoc(dst, p.Doc)
	}
	dst = strconv.AppendInt(append(dst, `,"timestamp":`...), p.Timestamp, 10)
	return append(dst, "}}"...)
}

// AppendJSON appends the presence error as compact JSON.
func (p PresenceError) AppendJSON(dst []byte) []byte {
	dst = appendJSString(append(dst, `{"event":"presence","data":{"scopeKey":`...), p.ScopeKey)
	dst = appendJSString(append(dst, `,"error":`...), p.Code)
	dst = strconv.AppendInt(append(dst, `,"timestamp":`...), p.Timestamp, 10)
	return append(dst, "}}"...)
}

// AppendJSON appends Raw verbatim.
func (e UnknownEvent) AppendJSON(dst []byte) []byte { return append(dst, e.Raw...) }

// MarshalJSON encodes h, refusing integers outside ±(2^53−1).
func (h Hello) MarshalJSON() ([]byte, error) {
	var err *EncodeError
	err = rtCheckInt("hello.protocolVersion", h.ProtocolVersion, err)
	err = rtCheckInt("hello.cursor", h.Cursor, err)
	err = rtCheckInt("hello.latestCursor", h.LatestCursor, err)
	err = rtCheckInt("hello.timestamp", h.Timestamp, err)
	return rtMarshal(h, err)
}

// MarshalJSON encodes w, refusing an undefined reason or an integer outside
// ±(2^53−1).
func (w Wake) MarshalJSON() ([]byte, error) {
	var err *EncodeError
	if w.Reason.String() == "" {
		err = encodeErrorf("sync.reason: undefined wake reason %d", w.Reason)
	}
	err = rtCheckInt("sync.cursor", w.Cursor, err)
	err = rtCheckInt("sync.timestamp", w.Timestamp, err)
	return rtMarshal(w, err)
}

// MarshalJSON encodes h, refusing a timestamp outside ±(2^53−1).
func (h Heartbeat) MarshalJSON() ([]byte, error) {
	return rtMarshal(h, rtCheckInt("heartbeat.timestamp", h.Timestamp, nil))
}

// MarshalJSON encodes p, refusing an empty scope key, an undefined kind, a
// join or update without an object Doc, or a timestamp outside ±(2^53−1).
// A leave's Doc is ignored.
func (p PresenceFanout) MarshalJSON() ([]byte, error) {
	var err *EncodeError
	switch {
	case p.ScopeKey == "":
		err = encodeErrorf("presence.scopeKey: empty")
	case p.Kind.String() == "":
		err = encodeErrorf("presence.kind: undefined kind %d", p.Kind)
	case p.Kind != PresenceLeave && !rtValidDoc(p.Doc):
		err = encodeErrorf("presence.doc: not a JSON object")
	}
	return rtMarshal(p, rtCheckInt("presence.timestamp", p.Timestamp, err))
}

// MarshalJSON encodes p, refusing an empty scope key or a timestamp outside
// ±(2^53−1).
func (p PresenceError) MarshalJSON() ([]byte, error) {
	var err *EncodeError
	if p.ScopeKey == "" {
		err = encodeErrorf("presence.scopeKey: empty")
	}
	return rtMarshal(p, rtCheckInt("presence.timestamp", p.Timestamp, err))
}

// MarshalJSON returns a copy of Raw, refusing it if it is not a JSON object.
func (e UnknownEvent) MarshalJSON() ([]byte, error) {
	if !rtValidDoc(e.Raw) {
		return nil, encodeErrorf("unknown event %q: raw message is not a JSON object", e.Name)
	}
	return e.AppendJSON(nil), nil
}

// rtMarshal finishes a MarshalJSON: the value's JSON, or the check failure.
func rtMarshal(v interface{ AppendJSON([]byte) []byte }, err *EncodeError) ([]byte, error) {
	if err != nil {
		return nil, err
	}
	return v.AppendJSON(make([]byte, 0, 128)), nil
}
