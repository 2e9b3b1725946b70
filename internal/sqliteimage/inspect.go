package sqliteimage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// sqliteMagic starts every SQLite database file.
var sqliteMagic = []byte("SQLite format 3\x00")

// ErrInvalid marks an image that is not well formed (§5.3 application
// contract, step 2).
var ErrInvalid = errors.New("sqlite image: invalid")

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// Inspect opens an image read-only and checks its structure the way a
// client does before applying it: the bytes open as a SQLite database with
// exactly two tables, the metadata table has exactly the §5.3 columns and
// one row of format 1, the data table it names exists and ends with
// `_syncular_version INTEGER NOT NULL`, and the data table holds rowCount
// rows. It returns the metadata, the data table's columns without the
// version column, and the row count. Failures wrap ErrInvalid.
func Inspect(ctx context.Context, image []byte) (Meta, []Column, int64, error) {
	var (
		meta  Meta
		cols  []Column
		count int64
	)
	err := withImage(ctx, image, func(db *sql.DB) error {
		var err error
		meta, cols, count, err = inspect(ctx, db)
		return err
	})
	return meta, cols, count, err
}

// withImage writes image to a temporary file and opens it read-only.
func withImage(ctx context.Context, image []byte, fn func(db *sql.DB) error) (err error) {
	if !bytes.HasPrefix(image, sqliteMagic) {
		return invalidf("not a SQLite database")
	}
	f, err := os.CreateTemp("", "syncular-image-read-*.sqlite")
	if err != nil {
		return fmt.Errorf("sqlite image: temporary file: %w", err)
	}
	path := f.Name()
	defer os.Remove(path)
	_, werr := f.Write(image)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("sqlite image: temporary file: %w", werr)
	}
	q := url.Values{}
	q.Set("mode", "ro")
	q.Set("immutable", "1")
	db, err := sql.Open(driverName, "file:"+(&url.URL{Path: path}).EscapedPath()+"?"+q.Encode())
	if err != nil {
		return fmt.Errorf("sqlite image: open: %w", err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if err := db.PingContext(ctx); err != nil {
		return invalidf("open: %v", err)
	}
	return fn(db)
}

func inspect(ctx context.Context, db *sql.DB) (Meta, []Column, int64, error) {
	var meta Meta
	tables, err := queryStrings(ctx, db, `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\_%' ESCAPE '\' ORDER BY name`)
	if err != nil {
		return meta, nil, 0, invalidf("read the schema: %v", err)
	}
	if len(tables) != 2 {
		return meta, nil, 0, invalidf("%d tables, want 2", len(tables))
	}
	mcols, err := tableColumns(ctx, db, MetadataTable)
	if err != nil {
		return meta, nil, 0, err
	}
	if !sameColumns(mcols, metadataColumns) {
		return meta, nil, 0, invalidf("%s does not have the format-1 columns", MetadataTable)
	}
	var n int64
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM "_syncular_segment"`).Scan(&n); err != nil {
		return meta, nil, 0, invalidf("read %s: %v", MetadataTable, err)
	}
	if n != 1 {
		return meta, nil, 0, invalidf("%s has %d rows, want 1", MetadataTable, n)
	}
	var format, rowCount int64
	err = db.QueryRowContext(ctx, `SELECT format, "table", schemaVersion, asOfCommitSeq, scopeDigest, rowCount FROM "_syncular_segment"`).
		Scan(&format, &meta.Table, &meta.SchemaVersion, &meta.AsOfCommitSeq, &meta.ScopeDigest, &rowCount)
	if err != nil {
		return meta, nil, 0, invalidf("read %s: %v", MetadataTable, err)
	}
	if format != Format {
		return meta, nil, 0, invalidf("format %d, want %d", format, Format)
	}
	data := tables[0]
	if data == MetadataTable {
		data = tables[1]
	}
	if data != meta.Table {
		return meta, nil, 0, invalidf("the data table is %q, the metadata names %q", data, meta.Table)
	}
	cols, err := tableColumns(ctx, db, data)
	if err != nil {
		return meta, nil, 0, err
	}
	last := len(cols) - 1
	if last < 1 || !sameColumns(cols[last:], []Column{{Name: VersionColumn, DeclType: "INTEGER", NotNull: true}}) {
		return meta, nil, 0, invalidf("the data table does not end with %s INTEGER NOT NULL", VersionColumn)
	}
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+quoteIdent(data)).Scan(&n); err != nil {
		return meta, nil, 0, invalidf("count rows: %v", err)
	}
	if n != rowCount {
		return meta, nil, 0, invalidf("the data table has %d rows, the metadata says %d", n, rowCount)
	}
	return meta, cols[:last], rowCount, nil
}

func queryStrings(ctx context.Context, db *sql.DB, query string) ([]string, error) {
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// tableColumns reads a table's columns from PRAGMA table_info.
func tableColumns(ctx context.Context, db *sql.DB, table string) ([]Column, error) {
	rows, err := db.QueryContext(ctx, `SELECT name, type, "notnull", pk FROM pragma_table_info(?)`, table)
	if err != nil {
		return nil, invalidf("read the columns of %s: %v", table, err)
	}
	defer rows.Close()
	var cols []Column
	for rows.Next() {
		var (
			c       Column
			notNull int
			pk      int
		)
		if err := rows.Scan(&c.Name, &c.DeclType, &notNull, &pk); err != nil {
			return nil, invalidf("read the columns of %s: %v", table, err)
		}
		c.NotNull, c.PrimaryKey = notNull != 0, pk != 0
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, invalidf("read the columns of %s: %v", table, err)
	}
	return cols, nil
}

func sameColumns(got, want []Column) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i].Name != want[i].Name || !strings.EqualFold(got[i].DeclType, want[i].DeclType) ||
			got[i].NotNull != want[i].NotNull || got[i].PrimaryKey != want[i].PrimaryKey {
			return false
		}
	}
	return true
}

// Expect is what a client knows before applying an image: the SEGMENT_REF
// descriptor and its own generated schema for the table.
type Expect struct {
	SegmentID     string
	Table         string
	SchemaVersion int32
	AsOfCommitSeq int64
	ScopeDigest   string
	RowCount      int64
	// Columns and PrimaryKey are the generated schema of Table.
	Columns    []wire.Column
	PrimaryKey int
}

// Verify runs the checks of the §5.3 application contract, steps 1 to 3,
// with their error codes: the content address and the structure and
// metadata of the image are sync.invalid_request; the data table's columns
// (names and order, and the producer rules this server follows: affinity,
// NOT NULL and the primary key) are sync.schema_mismatch.
func Verify(ctx context.Context, image []byte, want Expect) error {
	sum := sha256.Sum256(image)
	if id := "sha256:" + hex.EncodeToString(sum[:]); id != want.SegmentID {
		return syncerr.New(syncerr.CodeInvalidRequest, "sqlite image: the bytes do not hash to the segment id")
	}
	meta, cols, count, err := Inspect(ctx, image)
	if err != nil {
		if errors.Is(err, ErrInvalid) {
			return syncerr.Wrap(syncerr.CodeInvalidRequest, err.Error(), err)
		}
		return err
	}
	if meta.Table != want.Table || meta.SchemaVersion != want.SchemaVersion || meta.AsOfCommitSeq != want.AsOfCommitSeq ||
		meta.ScopeDigest != want.ScopeDigest || count != want.RowCount {
		return syncerr.New(syncerr.CodeInvalidRequest, fmt.Sprintf("sqlite image: metadata %+v (rowCount %d) does not match the descriptor", meta, count))
	}
	exp := make([]Column, len(want.Columns))
	for i, c := range want.Columns {
		t, _ := declType(c.Type)
		exp[i] = Column{Name: c.Name, DeclType: t, NotNull: !c.Nullable, PrimaryKey: i == want.PrimaryKey}
	}
	if !sameColumns(cols, exp) {
		return syncerr.New(syncerr.CodeSchemaMismatch, "sqlite image: the data table's columns do not match the schema")
	}
	return nil
}

// ReadRows reads the rows of an image's data table in primary-key order,
// decoding the cells back into values of cols (the table's columns). It
// checks each cell's storage class against its column's type.
func ReadRows(ctx context.Context, image []byte, cols []wire.Column, pk int) ([]Row, error) {
	var out []Row
	err := withImage(ctx, image, func(db *sql.DB) error {
		meta, _, _, err := inspect(ctx, db)
		if err != nil {
			return err
		}
		if pk < 0 || pk >= len(cols) {
			return fmt.Errorf("sqlite image: primary key %d out of range", pk)
		}
		names := make([]string, 0, len(cols)+1)
		for _, c := range cols {
			names = append(names, quoteIdent(c.Name))
		}
		names = append(names, quoteIdent(VersionColumn))
		rows, err := db.QueryContext(ctx, "SELECT "+strings.Join(names, ", ")+" FROM "+quoteIdent(meta.Table)+
			" ORDER BY "+quoteIdent(cols[pk].Name))
		if err != nil {
			return invalidf("read rows: %v", err)
		}
		defer rows.Close()
		cells := make([]any, len(names))
		ptrs := make([]any, len(names))
		for i := range cells {
			ptrs[i] = &cells[i]
		}
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				return invalidf("read rows: %v", err)
			}
			r := Row{Values: make([]wire.Value, len(cols))}
			for i, c := range cols {
				if err := decodeCell(c, cells[i], &r.Values[i]); err != nil {
					return invalidf("row %d: %v", len(out), err)
				}
			}
			v, ok := cells[len(cols)].(int64)
			if !ok || v < 1 {
				return invalidf("row %d: %s is %v", len(out), VersionColumn, cells[len(cols)])
			}
			r.ServerVersion = v
			out = append(out, r)
		}
		return rows.Err()
	})
	return out, err
}

// decodeCell turns a cell back into a value of column c.
func decodeCell(c wire.Column, cell any, v *wire.Value) error {
	if cell == nil {
		if !c.Nullable {
			return fmt.Errorf("column %s: NULL in a non-nullable column", c.Name)
		}
		v.Null = true
		return nil
	}
	ok := false
	switch c.Type {
	case wire.TypeString, wire.TypeJSON, wire.TypeBlobRef:
		v.Str, ok = cell.(string)
	case wire.TypeInteger:
		v.Int, ok = cell.(int64)
	case wire.TypeBoolean:
		var n int64
		n, ok = cell.(int64)
		ok = ok && (n == 0 || n == 1)
		v.Bool = n == 1
	case wire.TypeFloat:
		v.Float, ok = cell.(float64)
	case wire.TypeBytes, wire.TypeCRDT:
		v.Bytes, ok = cell.([]byte)
	}
	if !ok {
		return fmt.Errorf("column %s: cell %T does not hold a %s", c.Name, cell, c.Type)
	}
	return nil
}
