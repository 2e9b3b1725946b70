package store

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/syncgo/syncgo/wire"
)

// The JSON encodings below are the ones the reference server stores, so
// that a database can be shared between the two servers.

// pushRecordJSON is the stored form of a PushRecord.
type pushRecordJSON struct {
	Status        string         `json:"status"`
	CommitSeq     *int64         `json:"commitSeq,omitempty"`
	RecordedAtMs  int64          `json:"recordedAtMs,omitempty"`
	CacheIdentity string         `json:"cacheIdentity,omitempty"`
	ActorID       string         `json:"actorId,omitempty"`
	Results       []opResultJSON `json:"results"`
}

type opResultJSON struct {
	OpIndex         int32           `json:"opIndex"`
	Status          string          `json:"status"`
	Code            string          `json:"code,omitempty"`
	Message         string          `json:"message,omitempty"`
	Retryable       *bool           `json:"retryable,omitempty"`
	Details         json.RawMessage `json:"details,omitempty"`
	ServerVersion   *int64          `json:"serverVersion,omitempty"`
	ServerRow       *string         `json:"serverRow,omitempty"`
	ConflictColumns *string         `json:"conflictColumns,omitempty"`
}

// EncodePushRecord returns the stored JSON of a push record.
func EncodePushRecord(rec PushRecord) ([]byte, error) {
	if b, ok := appendAppliedRecord(make([]byte, 0, 128+48*len(rec.Results)), rec); ok {
		return b, nil
	}
	return marshalPushRecord(rec)
}

// appendAppliedRecord appends the JSON of the common record, an applied
// commit whose every operation applied, as marshalPushRecord writes it,
// without reflection (every commit writes one, on the writer); false for
// any other record.
func appendAppliedRecord(b []byte, rec PushRecord) ([]byte, bool) {
	if rec.Status != wire.PushApplied || len(rec.Details) != 0 {
		return nil, false
	}
	for _, r := range rec.Results {
		if r.Status != wire.OpApplied {
			return nil, false
		}
	}
	b = append(b, `{"status":`...)
	b = appendJSONString(b, rec.Status.String())
	b = append(b, `,"commitSeq":`...)
	b = strconv.AppendInt(b, rec.CommitSeq, 10)
	if rec.RecordedAtMs != 0 {
		b = append(b, `,"recordedAtMs":`...)
		b = strconv.AppendInt(b, rec.RecordedAtMs, 10)
	}
	if rec.CacheIdentity != "" {
		b = append(b, `,"cacheIdentity":`...)
		b = appendJSONString(b, rec.CacheIdentity)
	}
	if rec.ActorID != "" {
		b = append(b, `,"actorId":`...)
		b = appendJSONString(b, rec.ActorID)
	}
	b = append(b, `,"results":[`...)
	for i, r := range rec.Results {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"opIndex":`...)
		b = strconv.AppendInt(b, int64(r.OpIndex), 10)
		b = append(b, `,"status":`...)
		b = appendJSONString(b, r.Status.String())
		b = append(b, '}')
	}
	return append(b, "]}"...), true
}

// marshalPushRecord is EncodePushRecord by encoding/json, for every record.
func marshalPushRecord(rec PushRecord) ([]byte, error) {
	out := pushRecordJSON{
		Status:        rec.Status.String(),
		RecordedAtMs:  rec.RecordedAtMs,
		CacheIdentity: rec.CacheIdentity,
		ActorID:       rec.ActorID,
		Results:       make([]opResultJSON, len(rec.Results)),
	}
	if rec.Status != wire.PushRejected {
		seq := rec.CommitSeq
		out.CommitSeq = &seq
	}
	for i, r := range rec.Results {
		o := opResultJSON{OpIndex: r.OpIndex, Status: r.Status.String()}
		switch r.Status {
		case wire.OpConflict:
			o.Code, o.Message = r.Code, r.Message
			sv := r.ServerVersion
			o.ServerVersion = &sv
			row := base64.StdEncoding.EncodeToString(r.ServerRow)
			o.ServerRow = &row
			if r.ConflictColumns != nil {
				cc := base64.StdEncoding.EncodeToString(r.ConflictColumns)
				o.ConflictColumns = &cc
			}
		case wire.OpError:
			o.Code, o.Message = r.Code, r.Message
			retry := r.Retryable
			o.Retryable = &retry
			for _, d := range rec.Details {
				if d.OpIndex == r.OpIndex {
					o.Details = json.RawMessage(d.DetailsJSON)
				}
			}
		}
		out.Results[i] = o
	}
	return json.Marshal(out)
}

// DecodePushRecord parses the stored JSON of a push record. A record that
// does not parse is ErrUnreadable.
func DecodePushRecord(b []byte) (PushRecord, error) {
	var in pushRecordJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return PushRecord{}, fmt.Errorf("%w: %v", ErrUnreadable, err)
	}
	rec := PushRecord{RecordedAtMs: in.RecordedAtMs, CacheIdentity: in.CacheIdentity, ActorID: in.ActorID}
	switch in.Status {
	case "applied", "cached":
		rec.Status = wire.PushApplied
		if in.CommitSeq == nil {
			return PushRecord{}, fmt.Errorf("%w: applied record without commitSeq", ErrUnreadable)
		}
		rec.CommitSeq = *in.CommitSeq
	case "rejected":
		rec.Status = wire.PushRejected
	default:
		return PushRecord{}, fmt.Errorf("%w: status %q", ErrUnreadable, in.Status)
	}
	rec.Results = make([]wire.OpResult, len(in.Results))
	for i, o := range in.Results {
		r := wire.OpResult{OpIndex: o.OpIndex, Code: o.Code, Message: o.Message}
		switch o.Status {
		case "applied":
			r.Status = wire.OpApplied
		case "conflict":
			r.Status = wire.OpConflict
			if o.ServerVersion != nil {
				r.ServerVersion = *o.ServerVersion
			}
			var err error
			if r.ServerRow, err = decodeB64(o.ServerRow); err != nil {
				return PushRecord{}, err
			}
			if o.ConflictColumns != nil {
				if r.ConflictColumns, err = decodeB64(o.ConflictColumns); err != nil {
					return PushRecord{}, err
				}
			}
		case "error":
			r.Status = wire.OpError
			r.Retryable = o.Retryable != nil && *o.Retryable
			if len(o.Details) > 0 && string(o.Details) != "null" {
				rec.Details = append(rec.Details, wire.DetailEntry{OpIndex: o.OpIndex, DetailsJSON: canonicalDetails(o.Details)})
			}
		default:
			return PushRecord{}, fmt.Errorf("%w: result status %q", ErrUnreadable, o.Status)
		}
		rec.Results[i] = r
	}
	return rec, nil
}

func decodeB64(s *string) ([]byte, error) {
	if s == nil {
		return []byte{}, nil
	}
	b, err := base64.StdEncoding.DecodeString(*s)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnreadable, err)
	}
	return b, nil
}

// EncodeScopes returns the stored JSON of a row's or change's scopes: an
// object of variable to value.
func EncodeScopes(s wire.StoredScopes) []byte {
	b := make([]byte, 0, 16+24*len(s))
	b = append(b, '{')
	for i, e := range s {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, e.Key)
		b = append(b, ':')
		b = appendJSONString(b, e.Value)
	}
	return append(b, '}')
}

// appendJSONString appends s as encoding/json writes it: quoted as it is
// when it is printable ASCII with nothing to escape (no quote, backslash,
// or <, > and & that encoding/json escapes for HTML), else by
// encoding/json.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// DecodeScopes parses stored scopes JSON into canonical key order.
func DecodeScopes(b []byte) (wire.StoredScopes, error) {
	if out, ok := decodeFlatScopes(b); ok {
		return out, nil
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: scopes: %v", ErrUnreadable, err)
	}
	return ScopesFromMap(m), nil
}

// decodeFlatScopes is the fast path of DecodeScopes for what the servers
// write: an object of string values, without escapes, in valid UTF-8,
// with distinct keys, compact (as sqlitestore and the reference store it)
// or with JSON whitespace between the tokens (as Postgres prints a JSONB
// object: {"list_id": "work"}). Anything else reports false and takes the
// general decoder, so both give the same answer (FuzzDecodeScopes).
func decodeFlatScopes(b []byte) (wire.StoredScopes, bool) {
	if !utf8.Valid(b) {
		return nil, false
	}
	p := skipSpace(b)
	if len(p) == 0 || p[0] != '{' {
		return nil, false
	}
	p = skipSpace(p[1:])
	if len(p) > 0 && p[0] == '}' {
		if len(skipSpace(p[1:])) != 0 {
			return nil, false
		}
		return wire.StoredScopes{}, true
	}
	// str reads a quoted string without escapes at the start of p.
	str := func(p []byte) (string, []byte, bool) {
		if len(p) == 0 || p[0] != '"' {
			return "", nil, false
		}
		for i := 1; i < len(p); i++ {
			switch c := p[i]; {
			case c == '"':
				return string(p[1:i]), skipSpace(p[i+1:]), true
			case c == '\\' || c < 0x20:
				return "", nil, false
			}
		}
		return "", nil, false
	}
	out := make(wire.StoredScopes, 0, 2)
	for {
		k, rest, ok := str(p)
		if !ok || len(rest) == 0 || rest[0] != ':' {
			return nil, false
		}
		v, rest, ok := str(skipSpace(rest[1:]))
		if !ok || len(rest) == 0 {
			return nil, false
		}
		for _, e := range out {
			if e.Key == k {
				return nil, false
			}
		}
		out = append(out, wire.StoredScope{Key: k, Value: v})
		if rest[0] == '}' {
			if len(skipSpace(rest[1:])) != 0 {
				return nil, false
			}
			break
		}
		if rest[0] != ',' {
			return nil, false
		}
		p = skipSpace(rest[1:])
	}
	if len(out) > 1 {
		slices.SortFunc(out, func(a, b wire.StoredScope) int { return wire.CompareKeys(a.Key, b.Key) })
	}
	return out, true
}

// skipSpace drops the JSON whitespace at the start of p.
func skipSpace(p []byte) []byte {
	for len(p) > 0 && (p[0] == ' ' || p[0] == '\t' || p[0] == '\n' || p[0] == '\r') {
		p = p[1:]
	}
	return p
}

// ScopesFromMap returns stored scopes in canonical key order.
func ScopesFromMap(m map[string]string) wire.StoredScopes {
	out := make(wire.StoredScopes, 0, len(m))
	for k, v := range m {
		out = append(out, wire.StoredScope{Key: k, Value: v})
	}
	slices.SortFunc(out, func(a, b wire.StoredScope) int { return wire.CompareKeys(a.Key, b.Key) })
	return out
}

// MatchScopes reports whether stored scopes lie inside effective scopes:
// for every effective key, the stored value for that key is one of the
// key's values (§3.2). Empty effective scopes match nothing.
func MatchScopes(stored wire.StoredScopes, effective wire.ScopeMap) bool {
	if len(effective) == 0 {
		return false
	}
	for _, e := range effective {
		v, ok := lookupScope(stored, e.Key)
		if !ok || !slices.Contains(e.Values, v) {
			return false
		}
	}
	return true
}

func lookupScope(s wire.StoredScopes, key string) (string, bool) {
	for _, e := range s {
		if e.Key == key {
			return e.Value, true
		}
	}
	return "", false
}

// EncodeSubscriptions returns the stored JSON of a subscription list.
func EncodeSubscriptions(subs []SubscriptionRecord) ([]byte, error) {
	if subs == nil {
		subs = []SubscriptionRecord{}
	}
	return json.Marshal(subs)
}

// DecodeSubscriptions parses a stored subscription list.
func DecodeSubscriptions(b []byte) ([]SubscriptionRecord, error) {
	var subs []SubscriptionRecord
	if len(b) == 0 {
		return nil, nil
	}
	if subs, ok := decodeFlatSubscriptions(b); ok {
		return subs, nil
	}
	if err := json.Unmarshal(b, &subs); err != nil {
		return nil, fmt.Errorf("%w: subscriptions: %v", ErrUnreadable, err)
	}
	return subs, nil
}

// canonicalDetails returns a recorded details object in the form it was
// emitted in (members in the order of wire.RejectionDetails, no spaces): a
// JSONB column keeps the value, not the bytes, and a replay must emit the
// identical companion frame (§6.3.1). An object outside the §6.3.1 shape
// is returned as stored.
func canonicalDetails(raw json.RawMessage) string {
	if wire.ValidateRejectionDetails(string(raw)) != nil {
		return string(raw)
	}
	var d wire.RejectionDetails
	if err := json.Unmarshal(raw, &d); err != nil {
		return string(raw)
	}
	b, err := json.Marshal(d)
	if err != nil {
		return string(raw)
	}
	return string(b)
}
