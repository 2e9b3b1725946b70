// Package sqliteimage builds and inspects SQLite-image bootstrap segments
// (SPEC.md §5.3, mediaType sqlite): a complete SQLite database file holding
// one table's whole effective-scope snapshot at the bootstrap pin.
//
// An image holds exactly two tables:
//
//   - the data table, named as the synced table: the schema-IR columns in
//     declaration order with the §5.3 affinities (string, json and blob_ref
//     TEXT; integer and boolean INTEGER; float REAL; bytes and crdt BLOB),
//     NOT NULL on the non-nullable columns and PRIMARY KEY on the primary
//     key, then `_syncular_version INTEGER NOT NULL`, the row's
//     server_version; WITHOUT ROWID for small rows unless the key is an
//     INTEGER column (the rowid itself);
//   - `_syncular_segment`, one row of metadata (format 1, table,
//     schemaVersion, asOfCommitSeq, scopeDigest, rowCount) that duplicates
//     the SEGMENT_REF descriptor so an image at rest describes itself.
//
// Images are not byte-deterministic (§5.3): the content address pins the
// bytes served, and the engine shares one image per reuse key instead of
// relying on two builds hashing alike. [Build] writes the file in a
// temporary directory and returns its bytes; [Inspect] and [Verify] read an
// image back the way a client validates one before applying it.
//
// The SQLite engine is modernc.org/sqlite (pure Go) through the direct API
// of zombiezen.com/go/sqlite, as in sqlitestore.
package sqliteimage

import (
	"errors"

	"github.com/syncgo/syncgo/wire"
)

// Format is the image format this package writes and accepts (§5.3).
const Format = 1

// The reserved names of an image (§5.3).
const (
	// MetadataTable is the name of the one-row metadata table.
	MetadataTable = "_syncular_segment"
	// VersionColumn is the last column of the data table: the row's
	// server_version.
	VersionColumn = "_syncular_version"
)

// metadataColumns are the columns of MetadataTable, in order.
var metadataColumns = []Column{
	{Name: "format", DeclType: "INTEGER", NotNull: true},
	{Name: "table", DeclType: "TEXT", NotNull: true},
	{Name: "schemaVersion", DeclType: "INTEGER", NotNull: true},
	{Name: "asOfCommitSeq", DeclType: "INTEGER", NotNull: true},
	{Name: "scopeDigest", DeclType: "TEXT", NotNull: true},
	{Name: "rowCount", DeclType: "INTEGER", NotNull: true},
}

// Meta is the descriptor an image carries in its metadata table, less the
// row count, which [Build] counts itself.
type Meta struct {
	Table         string
	SchemaVersion int32
	AsOfCommitSeq int64
	ScopeDigest   string
}

// Row is one snapshot row of an image: its server_version (≥ 1) and its
// values in column order, as the row codec decodes them (§2.4).
type Row struct {
	ServerVersion int64
	Values        []wire.Value
}

// Column is a column of a table inside an image, as SQLite declares it.
type Column struct {
	Name string
	// DeclType is the declared type ("TEXT", "INTEGER", "REAL", "BLOB").
	DeclType   string
	NotNull    bool
	PrimaryKey bool
}

// Errors of Build that the caller may answer by serving the rows lane.
var (
	// ErrTooLarge reports an image over the builder's MaxBytes.
	ErrTooLarge = errors.New("sqlite image: over the size limit")
	// ErrUnrepresentable reports a value SQLite cannot store as it is: a
	// NaN float, which SQLite would turn into NULL, or a negative zero,
	// which it would read back as +0.
	ErrUnrepresentable = errors.New("sqlite image: value not representable in SQLite")
)

// declType returns the §5.3 affinity of a column type.
func declType(t wire.ColumnType) (string, bool) {
	switch t {
	case wire.TypeString, wire.TypeJSON, wire.TypeBlobRef:
		return "TEXT", true
	case wire.TypeInteger, wire.TypeBoolean:
		return "INTEGER", true
	case wire.TypeFloat:
		return "REAL", true
	case wire.TypeBytes, wire.TypeCRDT:
		return "BLOB", true
	}
	return "", false
}

// quoteIdent quotes an SQLite identifier.
func quoteIdent(name string) string {
	b := make([]byte, 0, len(name)+2)
	b = append(b, '"')
	for i := 0; i < len(name); i++ {
		if name[i] == '"' {
			b = append(b, '"')
		}
		b = append(b, name[i])
	}
	return string(append(b, '"'))
}
