package remotewire

import "fmt"

// ContentType is the media type of operation requests and responses.
const ContentType = "application/vnd.syncular.operations.v1+json"

// Revision is the protocol revision every message carries.
const Revision = 1

// Kinds of requests and messages.
const (
	KindQuery      = "query"
	KindCommand    = "command"
	KindError      = "error"
	KindWatch      = "watch"
	KindUnwatch    = "unwatch"
	KindSnapshot   = "snapshot"
	KindWatchError = "watch_error"
)

// Request is a decoded operation request (§5).
type Request struct {
	Kind        string // KindQuery or KindCommand
	ClientID    string
	OperationID string
	RequestID   string // commands only
	// Params is the decoded params value; nil when absent or null.
	Params any
}

// WatchMessage is a decoded client message of a watch socket (§6).
type WatchMessage struct {
	Kind        string // KindWatch or KindUnwatch
	WatchID     string
	ClientID    string // watch only
	OperationID string // watch only
	Params      any
}

// envelope decodes a message and checks its revision and kind.
func envelope(data []byte, kinds ...string) (Object, string, error) {
	v, err := Decode(data)
	if err != nil {
		return nil, "", err
	}
	obj, ok := v.(Object)
	if !ok {
		return nil, "", failf("a message must be an object")
	}
	rev, _ := obj.Get("revision")
	switch r := rev.(type) {
	case float64:
		if r != Revision {
			return nil, "", failf("unsupported revision %v", r)
		}
	case int64:
		if r != Revision {
			return nil, "", failf("unsupported revision %v", r)
		}
	default:
		return nil, "", failf("revision is missing")
	}
	kind, err := str(obj, "kind", true)
	if err != nil {
		return nil, "", err
	}
	for _, k := range kinds {
		if kind == k {
			return obj, kind, nil
		}
	}
	return nil, "", failf("unexpected kind %q", kind)
}

// str reads a string member; required ones must be non-empty.
func str(obj Object, key string, required bool) (string, error) {
	v, ok := obj.Get(key)
	if !ok {
		if required {
			return "", failf("%s is missing", key)
		}
		return "", nil
	}
	s, isStr := v.(string)
	if !isStr {
		return "", failf("%s is not a string", key)
	}
	if required && s == "" {
		return "", failf("%s is empty", key)
	}
	return s, nil
}

// DecodeRequest decodes an operation request. A *DecodeError means the
// request is malformed (operation.invalid_request).
func DecodeRequest(data []byte) (*Request, error) {
	obj, kind, err := envelope(data, KindQuery, KindCommand)
	if err != nil {
		return nil, err
	}
	r := &Request{Kind: kind}
	if r.ClientID, err = str(obj, "clientId", true); err != nil {
		return nil, err
	}
	if r.OperationID, err = str(obj, "operationId", true); err != nil {
		return nil, err
	}
	if kind == KindCommand {
		if r.RequestID, err = str(obj, "requestId", true); err != nil {
			return nil, err
		}
	}
	r.Params, _ = obj.Get("params")
	return r, nil
}

// DecodeWatchMessage decodes a client message of a watch socket.
func DecodeWatchMessage(data []byte) (*WatchMessage, error) {
	obj, kind, err := envelope(data, KindWatch, KindUnwatch)
	if err != nil {
		return nil, err
	}
	m := &WatchMessage{Kind: kind}
	if m.WatchID, err = str(obj, "watchId", true); err != nil {
		return nil, err
	}
	if kind == KindUnwatch {
		return m, nil
	}
	if m.ClientID, err = str(obj, "clientId", true); err != nil {
		return nil, err
	}
	if m.OperationID, err = str(obj, "operationId", true); err != nil {
		return nil, err
	}
	m.Params, _ = obj.Get("params")
	return m, nil
}

// WatchIDOf returns the watchId of a message that may not decode as a
// whole, or "".
func WatchIDOf(data []byte) string {
	v, err := Decode(data)
	if err != nil {
		return ""
	}
	obj, ok := v.(Object)
	if !ok {
		return ""
	}
	id, _ := str(obj, "watchId", false)
	return id
}

// QueryResponse is the success response of a query (§5).
type QueryResponse struct {
	OperationID  string
	Rows         []Object
	MaxCommitSeq int64
}

// CommandResponse is the success response of a command (§5).
type CommandResponse struct {
	OperationID string
	RequestID   string
	Status      string // applied, cached or rejected
	CommitSeq   int64  // 0: absent
	Results     []any
}

// ErrorResponse is an operation-level failure (§5, §7).
type ErrorResponse struct {
	Code      string
	Message   string
	Retryable bool
}

// Snapshot is a watch's full replacement result (§6).
type Snapshot struct {
	WatchID      string
	OperationID  string
	Rows         []Object
	MaxCommitSeq int64
}

// WatchError is the failure of one watch (§6).
type WatchError struct {
	WatchID   string
	Code      string
	Message   string
	Retryable bool
}

func rowsValue(rows []Object) []any {
	out := make([]any, len(rows))
	for i, r := range rows {
		out[i] = r
	}
	return out
}

func head(kind string) Object {
	return Object{{Key: "revision", Value: Revision}, {Key: "kind", Value: kind}}
}

// Object returns the message as an encodable object.
func (r *QueryResponse) Object() Object {
	return append(head(KindQuery), Field{"operationId", r.OperationID}, Field{"rows", rowsValue(r.Rows)},
		Field{"maxCommitSeq", safeInt(r.MaxCommitSeq)})
}

// Object returns the message as an encodable object.
func (r *CommandResponse) Object() Object {
	o := append(head(KindCommand), Field{"operationId", r.OperationID}, Field{"requestId", r.RequestID},
		Field{"status", r.Status})
	if r.CommitSeq > 0 {
		o = append(o, Field{"commitSeq", safeInt(r.CommitSeq)})
	}
	results := r.Results
	if results == nil {
		results = []any{}
	}
	return append(o, Field{"results", results})
}

// Object returns the message as an encodable object.
func (r *ErrorResponse) Object() Object {
	return append(head(KindError), Field{"code", r.Code}, Field{"message", r.Message}, Field{"retryable", r.Retryable})
}

// Object returns the message as an encodable object.
func (s *Snapshot) Object() Object {
	return append(head(KindSnapshot), Field{"watchId", s.WatchID}, Field{"operationId", s.OperationID},
		Field{"rows", rowsValue(s.Rows)}, Field{"maxCommitSeq", safeInt(s.MaxCommitSeq)})
}

// Object returns the message as an encodable object.
func (e *WatchError) Object() Object {
	return append(head(KindWatchError), Field{"watchId", e.WatchID}, Field{"code", e.Code},
		Field{"message", e.Message}, Field{"retryable", e.Retryable})
}

// safeInt is a counter as a number value (the protocol's safe integers).
func safeInt(n int64) any { return float64(n) }

// Message is a message that renders as an object.
type Message interface{ Object() Object }

// Marshal encodes a message.
func Marshal(m Message) ([]byte, error) {
	b, err := Encode(nil, m.Object())
	if err != nil {
		return nil, fmt.Errorf("remotewire: encode %T: %w", m, err)
	}
	return b, nil
}
