package wire

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"unicode/utf8"
)

// Realtime channel tags (§8.7): the first byte of every binary WebSocket
// message on the realtime channel. JSON control messages travel as text
// messages and carry no tag.
const (
	// ChannelTagDelta marks a server→client standalone SSP2 response
	// message: a delta (§8.2).
	ChannelTagDelta byte = 0x00
	// ChannelTagRound marks one chunk of the in-flight sync round's byte
	// stream, in either direction.
	ChannelTagRound byte = 0x01
)

// RealtimeProtocolVersion is the protocolVersion a hello carries (§8.1).
const RealtimeProtocolVersion = 1

// Presence error codes a server→client presence error carries (§8.6.2).
// They are client-runtime codes, not §10 wire codes.
const (
	// PresenceTooLarge rejects a publish whose doc exceeds the size cap.
	PresenceTooLarge = "presence.too_large"
	// PresenceForbidden rejects a publish to a key the connection does not hold.
	PresenceForbidden = "presence.forbidden"
)

// WakeReason is the closed set of reasons a wake-up carries (§8.3).
type WakeReason uint8

// The three wake-up reasons. The zero WakeReason is not one of them.
const (
	// WakeDeltaTooLarge: the delta exceeded the message limits.
	WakeDeltaTooLarge WakeReason = iota + 1
	// WakeCatchupRequired: a gap the server cannot bridge with deltas.
	WakeCatchupRequired
	// WakeResetRequired: a server-declared discontinuity.
	WakeResetRequired
)

// String returns the wire name of r, or "" if r is not a defined reason.
func (r WakeReason) String() string {
	switch r {
	case WakeDeltaTooLarge:
		return "delta-too-large"
	case WakeCatchupRequired:
		return "catchup-required"
	case WakeResetRequired:
		return "reset-required"
	}
	return ""
}

// ParseWakeReason maps a wire name to its WakeReason.
func ParseWakeReason(s string) (WakeReason, bool) {
	for r := WakeDeltaTooLarge; r <= WakeResetRequired; r++ {
		if r.String() == s {
			return r, true
		}
	}
	return 0, false
}

// PresenceKind is the closed set of presence fanout kinds (§8.6.2).
type PresenceKind uint8

// The three presence kinds. The zero PresenceKind is not one of them.
const (
	// PresenceJoin is a peer's first document on the key.
	PresenceJoin PresenceKind = iota + 1
	// PresenceUpdate is a later document from a present peer.
	PresenceUpdate
	// PresenceLeave is a peer that cleared the key or disconnected.
	PresenceLeave
)

// String returns the wire name of k, or "" if k is not a defined kind.
func (k PresenceKind) String() string {
	switch k {
	case PresenceJoin:
		return "join"
	case PresenceUpdate:
		return "update"
	case PresenceLeave:
		return "leave"
	}
	return ""
}

// ParsePresenceKind maps a wire name to its PresenceKind.
func ParsePresenceKind(s string) (PresenceKind, bool) {
	for k := PresenceJoin; k <= PresenceLeave; k++ {
		if k.String() == s {
			return k, true
		}
	}
	return 0, false
}

// rtObject reads the members of one JSON object of a control message. As
// with JSON.parse, a duplicated key keeps its last value and unlisted keys
// are ignored. The first failure is sticky in err.
type rtObject struct {
	m    map[string]json.RawMessage
	what string
	err  *DecodeError
}

// rtParseRoot decodes a whole control message, which must be well-formed
// UTF-8 holding exactly one JSON object. Work is linear in len(b).
func rtParseRoot(b []byte, what string) *rtObject {
	o := &rtObject{what: what}
	if !utf8.Valid(b) {
		o.fail("not well-formed UTF-8")
		return o
	}
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		o.fail("not a JSON object")
		return o
	}
	if err := json.Unmarshal(b, &o.m); err != nil {
		o.fail("not valid JSON: %v", err)
	}
	return o
}

func (o *rtObject) fail(format string, args ...any) {
	if o.err == nil {
		o.err = invalidf("malformed realtime "+o.what+": "+format, args...)
	}
}

// has reports whether key is present, whatever its value.
func (o *rtObject) has(key string) bool {
	_, ok := o.m[key]
	return ok
}

// raw returns the value of a required key.
func (o *rtObject) raw(key string) json.RawMessage {
	if o.err != nil {
		return nil
	}
	v, ok := o.m[key]
	if !ok || len(v) == 0 {
		o.fail("missing %s", key)
		return nil
	}
	return v
}

// object returns the required member key as a reader for that object,
// named what in messages. The reader starts with this reader's failure, if
// any, so a caller checks only the innermost reader's err.
func (o *rtObject) object(key, what string) *rtObject {
	sub := &rtObject{what: what}
	v := o.raw(key)
	switch {
	case o.err != nil:
	case v[0] != '{':
		o.fail("%s must be a JSON object", key)
	default:
		if err := json.Unmarshal(v, &sub.m); err != nil {
			o.fail("%s: %v", key, err)
		}
	}
	sub.err = o.err
	return sub
}

// str returns the required string member key.
func (o *rtObject) str(key string) string {
	s, ok := o.optStr(key)
	if !ok {
		o.fail("%s must be a string", key)
	}
	return s
}

// optStr returns the member key if it is present and a string.
func (o *rtObject) optStr(key string) (string, bool) {
	v := o.m[key]
	if o.err != nil || len(v) < 2 || v[0] != '"' {
		return "", false
	}
	if bytes.IndexByte(v, '\\') < 0 {
		return string(v[1 : len(v)-1]), true // already checked as JSON and UTF-8
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", false
	}
	return s, true
}

// integer returns the required member key, which must be a JSON number
// whose value (as JSON.parse reads it) is an integer within ±(2^53−1)
// (§8.1). 57.0 and 5.7e1 are 57; 57.5 and 1e400 are malformed.
func (o *rtObject) integer(key string) int64 {
	v := o.raw(key)
	if o.err != nil {
		return 0
	}
	if v[0] != '-' && (v[0] < '0' || v[0] > '9') {
		o.fail("%s must be a number", key)
		return 0
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > MaxSafeInteger {
		o.fail("%s must be an integer within ±(2^53−1), got %.40s", key, v)
		return 0
	}
	return int64(f)
}

// boolean returns the required boolean member key.
func (o *rtObject) boolean(key string) bool {
	v := o.raw(key)
	switch {
	case o.err != nil:
		return false
	case string(v) == "true":
		return true
	case string(v) == "false":
		return false
	}
	o.fail("%s must be a boolean", key)
	return false
}

// doc returns the required member key as a compacted JSON object, or nil if
// it is null and nullOK is set. Anything else is malformed.
func (o *rtObject) doc(key string, nullOK bool) json.RawMessage {
	v := o.raw(key)
	switch {
	case o.err != nil:
		return nil
	case v[0] == '{':
		return rtCompact(v)
	case nullOK && string(v) == "null":
		return nil
	case nullOK:
		o.fail("%s must be a JSON object or null", key)
	default:
		o.fail("%s must be a JSON object", key)
	}
	return nil
}

// rtCompact returns a compacted copy of the valid JSON text v.
func rtCompact(v []byte) json.RawMessage {
	var buf bytes.Buffer
	buf.Grow(len(v))
	if json.Compact(&buf, v) != nil {
		return append(json.RawMessage(nil), bytes.TrimSpace(v)...)
	}
	return buf.Bytes()
}

// rtValidDoc reports whether doc is a JSON object.
func rtValidDoc(doc json.RawMessage) bool {
	t := bytes.TrimLeft(doc, " \t\r\n")
	return len(t) > 0 && t[0] == '{' && json.Valid(doc)
}

// rtCheckInt reports a realtime integer outside ±(2^53−1) to MarshalJSON.
func rtCheckInt(what string, v int64, err *EncodeError) *EncodeError {
	if err == nil && (v > MaxSafeInteger || v < -MaxSafeInteger) {
		return encodeErrorf("%s: %d outside ±(2^53−1)", what, v)
	}
	return err
}

// rtAppendDoc appends doc, or null if it is empty.
func rtAppendDoc(dst []byte, doc json.RawMessage) []byte {
	if len(doc) == 0 {
		return append(dst, "null"...)
	}
	return append(dst, doc...)
}
