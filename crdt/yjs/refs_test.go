package yjs

import (
	"encoding/base64"
	"errors"
	"testing"
)

// An item names its own client's structs (origin, right origin, parent
// item) only at clocks before its own: Yjs writes nothing else, and
// Y.applyUpdate does not wait for such a struct (a client's structs come
// in clock order), it looks it up and throws a TypeError. Accepting one
// would store a value that every client, and the reference merger,
// fail to apply, for good: each later merge carries it on. Each of these
// updates makes Y.applyUpdate (yjs 13.6) throw; the last two came from
// mutating real updates.
func TestForwardSameClientReferences(t *testing.T) {
	t.Parallel()
	b64 := func(s string) []byte {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	const parentID = 0 // parent info: an item's id follows, not a root name
	bad := map[string][]byte{
		"origin is the item itself":  enc(1, 1, 1, 0, strAfter, 1, 0, "a", 0),
		"origin ahead":               enc(1, 1, 1, 0, strAfter, 1, 5, "a", 0),
		"right origin ahead":         enc(1, 1, 1, 0, byte(refString|infoRightOrigin), 1, 5, "a", 0),
		"parent ahead":               enc(1, 1, 1, 0, strRoot, parentID, 1, 5, "a", 0),
		"parent is the item itself":  enc(1, 1, 1, 0, byte(refType), parentID, 1, 0, 1, 0),
		"origin ahead, second item":  enc(1, 2, 1, 0, strRoot, 1, "t", "a", strAfter, 1, 3, "b", 0),
		"mutated text and binary":    b64("AQMBAAMBAWECAQKHAQACBAABRQJoaQA="),
		"mutated deleted and binary": b64("AQMEAAEBAWEBgwRhAgECQwQAAgECAQQBAAE="),
	}
	var m Merger
	for name, b := range bad {
		if err := Validate(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: Validate says %v, want ErrMalformed", name, err)
		}
		if _, err := m.Merge(textUpdate(2, "ok"), b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s as incoming: err %v, want ErrMalformed", name, err)
		}
	}
	// Backward references of the same client, and forward ones of another
	// client (a dependency Yjs keeps pending), stay valid.
	good := map[string][]byte{
		"map entry of an earlier map": enc(1, 2, 1, 0, byte(refType), 1, "m", 1, byte(refString|infoParentSub), parentID, 1, 0, "k", "v", 0),
		"after an earlier item":       enc(1, 2, 1, 0, strRoot, 1, "t", "a", strAfter, 1, 0, "b", 0),
		"another client ahead":        enc(1, 1, 1, 0, strAfter, 2, 5, "a", 0),
	}
	for name, b := range good {
		if err := Validate(b); err != nil {
			t.Errorf("%s: Validate says %v, want nil", name, err)
		}
		if _, err := m.Merge(textUpdate(2, "ok"), b); err != nil {
			t.Errorf("%s as incoming: %v", name, err)
		}
	}
}
