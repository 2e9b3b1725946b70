package schema

import (
	"fmt"
	"hash/fnv"
	"strings"
)

// MaxIdentifierBytes is the longest table, column or index name, in UTF-8
// bytes: PostgreSQL truncates longer identifiers.
const MaxIdentifierBytes = 63

// IndexPrefix marks an index as created by the server: the physical name of
// every declared index starts with it, so a schema upgrade can drop and
// re-create exactly the indexes it owns and leave an operator's alone.
const IndexPrefix = "sync_ix_"

// checkIdentifier reports why name, the name of a kind of object ("table",
// "column", "index"), is not a portable identifier, or nil.
//
// A portable identifier is 1 to [MaxIdentifierBytes] bytes of ASCII letters,
// digits and underscores, not starting with a digit, and does not start
// with "sync_" or "_sync" in any case: app tables share a namespace with
// the storage's sync_* tables and carry _sync_* meta columns.
func checkIdentifier(kind, name string) error {
	if name == "" {
		return fmt.Errorf("%s name must not be empty", kind)
	}
	lower := strings.ToLower(name)
	if strings.HasPrefix(lower, "sync_") || strings.HasPrefix(lower, "_sync") {
		return fmt.Errorf("%s name %q uses a reserved prefix (sync_ and _sync belong to the server storage)", kind, name)
	}
	if len(name) > MaxIdentifierBytes {
		return fmt.Errorf("%s name %q is %d bytes long, over the %d-byte identifier limit of PostgreSQL", kind, name, len(name), MaxIdentifierBytes)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return fmt.Errorf("%s name %q is not a portable identifier (ASCII letters, digits and underscores, not starting with a digit)", kind, name)
		}
	}
	return nil
}

// caseNote explains a duplicate that differs from the first name in case.
func caseNote(first, name string) string {
	if first == name {
		return ""
	}
	return fmt.Sprintf(" (same as %q but for case, which SQLite does not distinguish)", first)
}

// PhysicalIndexName returns the name under which the server creates the
// declared index named declared: [IndexPrefix] followed by the declared
// name, or, when that would exceed [MaxIdentifierBytes], followed by the 16
// lowercase hex digits of the FNV-1a 64-bit hash of the declared name's
// UTF-8 bytes. The rule is the reference server's, so that two servers can
// share one database.
func PhysicalIndexName(declared string) string {
	if len(IndexPrefix)+len(declared) <= MaxIdentifierBytes {
		return IndexPrefix + declared
	}
	h := fnv.New64a()
	h.Write([]byte(declared))
	return fmt.Sprintf("%s%016x", IndexPrefix, h.Sum64())
}
