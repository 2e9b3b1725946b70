package sqliteimage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"zombiezen.com/go/sqlite"

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
	err := withImage(ctx, image, func(conn *sqlite.Conn) error {
		var err error
		meta, cols, count, err = inspect(conn)
		return err
	})
	return meta, cols, count, err
}

// withImage writes image to a temporary file and opens it read-only;
// ctx's cancellation interrupts fn's statements.
func withImage(ctx context.Context, image []byte, fn func(conn *sqlite.Conn) error) (err error) {
	if !bytes.HasPrefix(image, sqliteMagic) {
		return invalidf("not a SQLite database")
	}
	if err := ctx.Err(); err != nil {
		return err
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
	conn, err := sqlite.OpenConn("file:"+(&url.URL{Path: path}).EscapedPath()+"?"+q.Encode(), sqlite.OpenReadOnly|sqlite.OpenURI)
	if err != nil {
		return invalidf("open: %v", err)
	}
	defer conn.Close()
	if ctx.Done() != nil {
		conn.SetInterrupt(ctx.Done())
		defer conn.SetInterrupt(nil)
	}
	err = fn(conn)
	if err != nil && sqlite.ErrCode(err) == sqlite.ResultInterrupt && ctx.Err() != nil {
		return fmt.Errorf("%w: %v", ctx.Err(), err)
	}
	return err
}

// query runs a statement and calls fn for each row.
func query(conn *sqlite.Conn, sql string, fn func(st *sqlite.Stmt) error, args ...any) error {
	st, _, err := conn.PrepareTransient(sql)
	if err != nil {
		return err
	}
	defer st.Finalize()
	for i, a := range args {
		switch v := a.(type) {
		case string:
			st.BindText(i+1, v)
		default:
			return fmt.Errorf("sqlite image: unsupported argument %T", a)
		}
	}
	for {
		more, err := st.Step()
		if err != nil || !more {
			return err
		}
		if err := fn(st); err != nil {
			return err
		}
	}
}

// queryRow runs a statement that returns exactly one row and calls fn on
// it.
func queryRow(conn *sqlite.Conn, sql string, fn func(st *sqlite.Stmt)) error {
	rows := 0
	err := query(conn, sql, func(st *sqlite.Stmt) error {
		if rows++; rows == 1 {
			fn(st)
		}
		return nil
	})
	if err == nil && rows == 0 {
		err = errors.New("no rows")
	}
	return err
}

func inspect(conn *sqlite.Conn) (Meta, []Column, int64, error) {
	var meta Meta
	tables, err := queryStrings(conn, `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\_%' ESCAPE '\' ORDER BY name`)
	if err != nil {
		return meta, nil, 0, invalidf("read the schema: %v", err)
	}
	if len(tables) != 2 {
		return meta, nil, 0, invalidf("%d tables, want 2", len(tables))
	}
	mcols, err := tableColumns(conn, MetadataTable)
	if err != nil {
		return meta, nil, 0, err
	}
	if !sameColumns(mcols, metadataColumns) {
		return meta, nil, 0, invalidf("%s does not have the format-1 columns", MetadataTable)
	}
	var n int64
	if err := queryRow(conn, `SELECT COUNT(*) FROM "_syncular_segment"`, func(st *sqlite.Stmt) { n = st.ColumnInt64(0) }); err != nil {
		return meta, nil, 0, invalidf("read %s: %v", MetadataTable, err)
	}
	if n != 1 {
		return meta, nil, 0, invalidf("%s has %d rows, want 1", MetadataTable, n)
	}
	var format, rowCount int64
	err = queryRow(conn, `SELECT format, "table", schemaVersion, asOfCommitSeq, scopeDigest, rowCount FROM "_syncular_segment"`, func(st *sqlite.Stmt) {
		format = st.ColumnInt64(0)
		meta.Table = st.ColumnText(1)
		meta.SchemaVersion = st.ColumnInt32(2)
		meta.AsOfCommitSeq = st.ColumnInt64(3)
		meta.ScopeDigest = st.ColumnText(4)
		rowCount = st.ColumnInt64(5)
	})
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
	cols, err := tableColumns(conn, data)
	if err != nil {
		return meta, nil, 0, err
	}
	last := len(cols) - 1
	if last < 1 || !sameColumns(cols[last:], []Column{{Name: VersionColumn, DeclType: "INTEGER", NotNull: true}}) {
		return meta, nil, 0, invalidf("the data table does not end with %s INTEGER NOT NULL", VersionColumn)
	}
	if err := queryRow(conn, `SELECT COUNT(*) FROM `+quoteIdent(data), func(st *sqlite.Stmt) { n = st.ColumnInt64(0) }); err != nil {
		return meta, nil, 0, invalidf("count rows: %v", err)
	}
	if n != rowCount {
		return meta, nil, 0, invalidf("the data table has %d rows, the metadata says %d", n, rowCount)
	}
	return meta, cols[:last], rowCount, nil
}

func queryStrings(conn *sqlite.Conn, sql string) ([]string, error) {
	var out []string
	err := query(conn, sql, func(st *sqlite.Stmt) error {
		out = append(out, st.ColumnText(0))
		return nil
	})
	return out, err
}

// tableColumns reads a table's columns from PRAGMA table_info.
func tableColumns(conn *sqlite.Conn, table string) ([]Column, error) {
	var cols []Column
	err := query(conn, `SELECT name, type, "notnull", pk FROM pragma_table_info(?)`, func(st *sqlite.Stmt) error {
		cols = append(cols, Column{
			Name:       st.ColumnText(0),
			DeclType:   st.ColumnText(1),
			NotNull:    st.ColumnInt64(2) != 0,
			PrimaryKey: st.ColumnInt64(3) != 0,
		})
		return nil
	}, table)
	if err != nil {
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
	err := withImage(ctx, image, func(conn *sqlite.Conn) error {
		meta, _, _, err := inspect(conn)
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
		err = query(conn, "SELECT "+strings.Join(names, ", ")+" FROM "+quoteIdent(meta.Table)+
			" ORDER BY "+quoteIdent(cols[pk].Name), func(st *sqlite.Stmt) error {
			r := Row{Values: make([]wire.Value, len(cols))}
			for i, c := range cols {
				if err := decodeCell(c, cell(st, i), &r.Values[i]); err != nil {
					return invalidf("row %d: %v", len(out), err)
				}
			}
			v, ok := cell(st, len(cols)).(int64)
			if !ok || v < 1 {
				return invalidf("row %d: %s is %v", len(out), VersionColumn, cell(st, len(cols)))
			}
			r.ServerVersion = v
			out = append(out, r)
			return nil
		})
		if err != nil && !errors.Is(err, ErrInvalid) {
			return invalidf("read rows: %v", err)
		}
		return err
	})
	return out, err
}

// cell returns column i of the current row as its storage class's Go
// value: nil, int64, float64, string or []byte (non-nil, empty for an
// empty blob).
func cell(st *sqlite.Stmt, i int) any {
	switch st.ColumnType(i) {
	case sqlite.TypeInteger:
		return st.ColumnInt64(i)
	case sqlite.TypeFloat:
		return st.ColumnFloat(i)
	case sqlite.TypeText:
		return st.ColumnText(i)
	case sqlite.TypeBlob:
		b := make([]byte, st.ColumnLen(i))
		st.ColumnBytes(i, b)
		return b
	}
	return nil
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
