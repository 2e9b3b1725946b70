package store

import (
	"encoding/json"
	"fmt"
)

// EncodeLeaseScopes is the stored form of a lease's allowed scopes (the
// JSON object of sync_leases.allowed_scopes).
func EncodeLeaseScopes(m map[string][]string) (string, error) {
	if m == nil {
		m = map[string][]string{}
	}
	b, err := json.Marshal(m)
	return string(b), err
}

// DecodeLeaseScopes reads a stored allowed_scopes object.
func DecodeLeaseScopes(s string) (map[string][]string, error) {
	var m map[string][]string
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, fmt.Errorf("%w: lease scopes: %v", ErrUnreadable, err)
	}
	return m, nil
}
