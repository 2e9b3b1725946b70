// Package syncerr is the protocol error catalog (§10): typed errors that
// carry a catalog code with its category, retryability, recommended action
// and HTTP status, and their JSON shape (§10.1).
package syncerr

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
)

// Error is a protocol error. Category, Retryable, Action and HTTPStatus are
// fixed by the code; Message and Details are per instance. Message never
// carries host exception text or names from Details.
type Error struct {
	Code    string
	Message string
	// Details is a JSON object (raw text), or empty.
	Details json.RawMessage
	// HTTPStatus overrides the catalog status when non-zero (for example
	// 413 or 415 for sync.invalid_request at the HTTP layer).
	HTTPStatus int
	// Err is the underlying cause, for logs only; it never reaches the
	// client.
	Err error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return e.Code + ": " + e.Message
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// LogValue renders the error in a log record as its text, cause included.
// Without it a JSON slog handler would marshal the error with MarshalJSON:
// the client's body ("internal server error"), which drops the cause.
func (e *Error) LogValue() slog.Value { return slog.StringValue(e.Error()) }

// Entry returns the catalog entry of the error's code.
func (e *Error) Entry() Entry {
	ent, ok := Lookup(e.Code)
	if !ok {
		return Entry{Code: e.Code, Category: "internal", Action: "inspectServer", HTTPStatus: 500}
	}
	return ent
}

// Status returns the HTTP status of the error.
func (e *Error) Status() int {
	if e.HTTPStatus != 0 {
		return e.HTTPStatus
	}
	return e.Entry().HTTPStatus
}

// New returns a protocol error with the given code and message.
func New(code, message string) *Error { return &Error{Code: code, Message: message} }

// Wrap returns a protocol error with a cause kept for logs.
func Wrap(code, message string, err error) *Error {
	return &Error{Code: code, Message: message, Err: err}
}

// WithDetails returns a copy of e carrying details, a value that marshals
// to a JSON object.
func (e *Error) WithDetails(details any) *Error {
	c := *e
	b, err := json.Marshal(details)
	if err == nil {
		c.Details = b
	}
	return &c
}

// As returns the *Error in err's chain, or nil.
func As(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// Internal is the answer to any failure outside the catalog (§10.2 host
// adapter errors): sync.internal_error with a fixed message; the cause is
// kept for the host's hook and logs only.
func Internal(err error) *Error {
	return &Error{Code: CodeInternalError, Message: "internal server error", Err: err}
}

// body is the §10.1 JSON shape.
type body struct {
	Code              string          `json:"code"`
	Message           string          `json:"message"`
	Category          string          `json:"category"`
	Retryable         bool            `json:"retryable"`
	RecommendedAction string          `json:"recommendedAction"`
	Details           json.RawMessage `json:"details,omitempty"`
}

// MarshalJSON renders the §10.1 shape.
func (e *Error) MarshalJSON() ([]byte, error) {
	ent := e.Entry()
	return json.Marshal(body{
		Code:              e.Code,
		Message:           e.Message,
		Category:          ent.Category,
		Retryable:         ent.Retryable,
		RecommendedAction: ent.Action,
		Details:           e.Details,
	})
}

// ParseJSON reads a §10.1 error body.
func ParseJSON(b []byte) (*Error, error) {
	var in body
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, err
	}
	if in.Code == "" {
		return nil, errors.New("error body without code")
	}
	return &Error{Code: in.Code, Message: in.Message, Details: in.Details}, nil
}
