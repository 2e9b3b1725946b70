package wire

import (
	"errors"
	"fmt"
)

// Protocol error codes that the codec itself produces (§1.7, §10.2).
const (
	// CodeInvalidRequest is the code of every decode error but one.
	CodeInvalidRequest = "sync.invalid_request"
	// CodeEmptyCommit is the decode error of a PUSH_COMMIT with zero operations.
	CodeEmptyCommit = "sync.empty_commit"
)

// DecodeError reports bytes that are not a valid SSP2 message, rows segment,
// sparse row, full row or realtime control message. Code is the §10 error
// code that the failure maps to; Reason says what was wrong, for logs.
type DecodeError struct {
	Code   string
	Reason string
	// Cause is an underlying condition such as ErrFrameTooLarge, or nil.
	Cause error
}

func (e *DecodeError) Error() string { return e.Code + ": " + e.Reason }

// Unwrap returns the underlying condition, if any.
func (e *DecodeError) Unwrap() error { return e.Cause }

// ErrorCode returns the protocol error code of err if it is, or wraps, a
// *DecodeError, and "" otherwise.
func ErrorCode(err error) string {
	var de *DecodeError
	if errors.As(err, &de) {
		return de.Code
	}
	return ""
}

func invalidf(format string, args ...any) *DecodeError {
	return &DecodeError{Code: CodeInvalidRequest, Reason: fmt.Sprintf(format, args...)}
}

// ErrFrameTooLarge is wrapped by the decode error returned when a frame's
// declared length exceeds the decoder's configured limit.
var ErrFrameTooLarge = errors.New("frame exceeds the size limit")

// EncodeError reports a value that the encoder refuses to write because no
// canonical SSP2 byte sequence exists for it (out-of-range integers, invalid
// UTF-8, keys out of order, a frame out of grammar, and so on).
type EncodeError struct {
	Reason string
}

func (e *EncodeError) Error() string { return "ssp2 encode: " + e.Reason }

func encodeErrorf(format string, args ...any) *EncodeError {
	return &EncodeError{Reason: fmt.Sprintf(format, args...)}
}
