package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Limits of the PUSH_RESULT_DETAILS object (§6.3.1).
const (
	MaxDetailsBytes        = 4096
	MaxDetailsFieldPaths   = 32
	MaxDetailsFieldPathLen = 160
	MaxDetailsTokenLen     = 96
	MaxDetailsReferences   = 16
	MaxDetailsRefKeyLen    = 64
	MaxDetailsRefValueLen  = 256
)

// RejectionDetails is the bounded recovery metadata of a terminating push
// error (§6.3.1).
type RejectionDetails struct {
	FieldPaths     []string          `json:"fieldPaths,omitempty"`
	Reason         string            `json:"reason,omitempty"`
	RequiredAction string            `json:"requiredAction,omitempty"`
	References     map[string]string `json:"references,omitempty"`
}

// ValidateRejectionDetails checks that s is a details object of §6.3.1: only
// the four known members, at least one present, each within its bounds, and
// the whole at most 4,096 bytes.
func ValidateRejectionDetails(s string) error {
	if len(s) > MaxDetailsBytes {
		return fmt.Errorf("details exceed %d bytes", MaxDetailsBytes)
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &raw); err != nil || raw == nil {
		return errors.New("details must be a JSON object")
	}
	var d RejectionDetails
	if err := dec.Decode(&d); err != nil {
		return fmt.Errorf("details: %v", err)
	}
	for k, v := range raw {
		// encoding/json matches member names without regard to case:
		// {"Reason":"…"} fills Reason but is not the member "reason",
		// and would skip the checks below.
		switch k {
		case "fieldPaths", "reason", "requiredAction", "references":
		default:
			return fmt.Errorf("details member %q is not one of §6.3.1", k)
		}
		if bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			return fmt.Errorf("details member %q is null", k)
		}
	}
	if len(raw) == 0 {
		return errors.New("details must carry at least one member")
	}
	if _, ok := raw["fieldPaths"]; ok {
		if err := checkFieldPaths(d.FieldPaths); err != nil {
			return err
		}
	}
	if _, ok := raw["reason"]; ok && !stableToken(d.Reason, MaxDetailsTokenLen) {
		return errors.New("details reason is not a stable token")
	}
	if _, ok := raw["requiredAction"]; ok && !stableToken(d.RequiredAction, MaxDetailsTokenLen) {
		return errors.New("details requiredAction is not a stable token")
	}
	if _, ok := raw["references"]; ok {
		if err := checkReferences(d.References); err != nil {
			return err
		}
	}
	return nil
}

func checkFieldPaths(paths []string) error {
	if len(paths) == 0 || len(paths) > MaxDetailsFieldPaths {
		return fmt.Errorf("details fieldPaths must hold 1-%d paths", MaxDetailsFieldPaths)
	}
	for i, p := range paths {
		if utf16Len(p) > MaxDetailsFieldPathLen || !fieldPath(p) {
			return fmt.Errorf("details field path %q is not a schema path", p)
		}
		for _, q := range paths[:i] {
			if q == p {
				return fmt.Errorf("details field path %q repeated", p)
			}
		}
	}
	return nil
}

func checkReferences(refs map[string]string) error {
	if len(refs) == 0 || len(refs) > MaxDetailsReferences {
		return fmt.Errorf("details references must hold 1-%d entries", MaxDetailsReferences)
	}
	for k, v := range refs {
		if !stableToken(k, MaxDetailsRefKeyLen) {
			return fmt.Errorf("details reference key %q is not a stable token", k)
		}
		if v == "" || len(v) > MaxDetailsRefValueLen || strings.TrimSpace(v) != v || hasControl(v) {
			return fmt.Errorf("details reference %q has an unsafe value", k)
		}
	}
	return nil
}

// fieldPath matches identifier(.identifier)* with ASCII identifiers.
func fieldPath(p string) bool {
	for _, part := range strings.Split(p, ".") {
		if part == "" {
			return false
		}
		for i := 0; i < len(part); i++ {
			c := part[i]
			alpha := c == '_' || (c|0x20 >= 'a' && c|0x20 <= 'z')
			if !alpha && (i == 0 || c < '0' || c > '9') {
				return false
			}
		}
	}
	return true
}

// stableToken matches [a-z][a-z0-9]*([._-][a-z0-9]+)* within max characters.
func stableToken(s string, max int) bool {
	if s == "" || len(s) > max || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	prevSep := false
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'):
			prevSep = false
		case c == '.' || c == '_' || c == '-':
			if prevSep {
				return false
			}
			prevSep = true
		default:
			return false
		}
	}
	return !prevSep
}

func hasControl(s string) bool {
	for _, r := range s {
		if r <= 0x1f || (r >= 0x7f && r <= 0x9f) {
			return true
		}
	}
	return false
}

func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	if !utf8.ValidString(s) {
		return len(s)
	}
	return n
}
