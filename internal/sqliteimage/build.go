package sqliteimage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"math"
	"os"
	"strings"

	"zombiezen.com/go/sqlite"

	"github.com/syncgo/syncgo/wire"
)

// Builder builds images. The zero Builder writes its temporary files in
// os.TempDir() and bounds nothing.
type Builder struct {
	// Dir is the directory of the temporary database files; empty means
	// os.TempDir(). Each build's file is removed before Build returns.
	Dir string
	// MaxBytes bounds the image; a bigger one fails with ErrTooLarge. Zero
	// or less means no bound.
	MaxBytes int64
}

// Build builds an image with the zero Builder's settings and its temporary
// file in dir. See [Builder.Build].
func Build(ctx context.Context, dir string, meta Meta, cols []wire.Column, pk int, rows iter.Seq2[[]Row, error]) ([]byte, error) {
	return Builder{Dir: dir}.Build(ctx, meta, cols, pk, rows)
}

// Build writes the image of one table: cols are the table's columns in
// declaration order, pk the position of its primary key, and rows yields
// the snapshot in batches (keyset order is best: it appends to the primary
// key index). The metadata row counts the rows yielded. A batch error from
// rows ends the build with that error.
//
// The rows are inserted in one transaction through prepared statements of
// up to 64 rows each, with journal_mode OFF and synchronous OFF (the file
// is scratch until its bytes are read). ctx is checked between batches.
func (b Builder) Build(ctx context.Context, meta Meta, cols []wire.Column, pk int, rows iter.Seq2[[]Row, error]) ([]byte, error) {
	f, err := b.BuildFile(ctx, meta, cols, pk, rows)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Bytes()
}

// File is a built image in its temporary file: read it (ReadAt, Bytes)
// and Close it, which removes the file.
type File struct {
	f    *os.File
	size int64
}

// Size is the image's length in bytes.
func (f *File) Size() int64 { return f.size }

// ReadAt implements io.ReaderAt over the image's bytes.
func (f *File) ReadAt(p []byte, off int64) (int, error) { return f.f.ReadAt(p, off) }

// Bytes reads the whole image.
func (f *File) Bytes() ([]byte, error) {
	out := make([]byte, f.size)
	if _, err := io.ReadFull(io.NewSectionReader(f.f, 0, f.size), out); err != nil {
		return nil, fmt.Errorf("sqlite image: read: %w", err)
	}
	return out, nil
}

// Close closes and removes the file.
func (f *File) Close() error {
	err := f.f.Close()
	if rerr := os.Remove(f.f.Name()); err == nil {
		err = rerr
	}
	return err
}

// BuildFile builds an image as Build does and returns its file instead of
// its bytes: a caller that streams them (a hash, a compressor) holds none
// of the image in memory.
func (b Builder) BuildFile(ctx context.Context, meta Meta, cols []wire.Column, pk int, rows iter.Seq2[[]Row, error]) (_ *File, err error) {
	if err := checkTable(meta.Table, cols, pk); err != nil {
		return nil, err
	}
	if rows == nil {
		rows = func(func([]Row, error) bool) {}
	}
	f, err := os.CreateTemp(b.Dir, "syncular-image-*.sqlite")
	if err != nil {
		return nil, fmt.Errorf("sqlite image: temporary file: %w", err)
	}
	path := f.Name()
	_ = f.Close()
	defer func() {
		_ = os.Remove(path + "-journal")
		if err != nil {
			_ = os.Remove(path)
		}
	}()
	if err := b.write(ctx, path, meta, cols, pk, rows); err != nil {
		return nil, err
	}
	if f, err = os.Open(path); err != nil {
		return nil, fmt.Errorf("sqlite image: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("sqlite image: %w", err)
	}
	if b.MaxBytes > 0 && fi.Size() > b.MaxBytes {
		_ = f.Close()
		return nil, fmt.Errorf("%w: %d bytes", ErrTooLarge, fi.Size())
	}
	return &File{f: f, size: fi.Size()}, nil
}

// write creates the two tables in the file at path and fills them.
func (b Builder) write(ctx context.Context, path string, meta Meta, cols []wire.Column, pk int, rows iter.Seq2[[]Row, error]) (err error) {
	conn, err := sqlite.OpenConn(path, sqlite.OpenReadWrite|sqlite.OpenCreate)
	if err != nil {
		return fmt.Errorf("sqlite image: open: %w", err)
	}
	defer func() {
		if cerr := conn.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("sqlite image: close: %w", cerr)
		}
	}()
	// The statements run without an interrupt: ctx is checked between
	// batches instead.
	for _, pragma := range []string{"PRAGMA journal_mode=OFF", "PRAGMA synchronous=OFF", "PRAGMA locking_mode=EXCLUSIVE"} {
		if err := execOnce(conn, pragma); err != nil {
			return fmt.Errorf("sqlite image: %s: %w", pragma, err)
		}
	}
	if err := execOnce(conn, "BEGIN"); err != nil {
		return fmt.Errorf("sqlite image: begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = execOnce(conn, "ROLLBACK")
		}
	}()
	width := len(cols) + 1
	multi := max(1, min(maxRowsPerInsert, maxVariables/width))
	var one, many *sqlite.Stmt
	defer func() {
		for _, st := range []*sqlite.Stmt{one, many} {
			if st != nil {
				_ = st.Finalize()
			}
		}
	}()
	// create creates the tables, the data table's layout chosen from the
	// first batch (none for an empty image), and prepares the inserts.
	create := func(first []Row) error {
		small := smallRows(cols, first)
		if small {
			// Small rows fill a page with many inserts: in a page cache of
			// 64 pages, not SQLite's 2 MiB, the build reuses the same
			// slots instead of taking fresh memory for every page (cold
			// 100,000-row image, 3 pairs: 268-273 -> 242-247 ms). Large
			// rows keep the default: WITHOUT ROWID or not, their overflow
			// pages built slower in a small cache.
			if err := execOnce(conn, "PRAGMA cache_size=64"); err != nil {
				return fmt.Errorf("sqlite image: cache size: %w", err)
			}
		}
		for _, ddl := range []string{createDataSQL(meta.Table, cols, pk, withoutRowID(cols, pk, small)), createMetadataSQL} {
			if err := execOnce(conn, ddl); err != nil {
				return fmt.Errorf("sqlite image: create table: %w", err)
			}
		}
		var err error
		if one, _, err = conn.PrepareTransient(insertDataSQL(meta.Table, cols, 1)); err != nil {
			return fmt.Errorf("sqlite image: prepare: %w", err)
		}
		if many, _, err = conn.PrepareTransient(insertDataSQL(meta.Table, cols, multi)); err != nil {
			return fmt.Errorf("sqlite image: prepare: %w", err)
		}
		return nil
	}
	var count, approx int64
	for batch, berr := range rows {
		if berr != nil {
			return berr
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if one == nil && len(batch) > 0 {
			if err := create(batch); err != nil {
				return err
			}
		}
		for len(batch) > 0 {
			k, stmt := multi, many
			if len(batch) < multi {
				k, stmt = 1, one
			}
			for j := range k {
				n, err := bindRow(stmt, j*width, cols, batch[j])
				if err != nil {
					_ = stmt.ClearBindings()
					return fmt.Errorf("sqlite image: row %d: %w", count+int64(j), err)
				}
				approx += n
			}
			_, err := stmt.Step()
			_ = stmt.Reset()
			if err != nil {
				return fmt.Errorf("sqlite image: insert rows %d to %d: %w", count, count+int64(k)-1, err)
			}
			count += int64(k)
			batch = batch[k:]
		}
		if b.MaxBytes > 0 && approx > b.MaxBytes {
			return fmt.Errorf("%w: over %d bytes of values", ErrTooLarge, approx)
		}
	}
	if one == nil {
		if err := create(nil); err != nil {
			return err
		}
	}
	md, _, err := conn.PrepareTransient(insertMetadataSQL)
	if err != nil {
		return fmt.Errorf("sqlite image: metadata: %w", err)
	}
	defer md.Finalize()
	md.BindInt64(1, Format)
	md.BindText(2, meta.Table)
	md.BindInt64(3, int64(meta.SchemaVersion))
	md.BindInt64(4, meta.AsOfCommitSeq)
	md.BindText(5, meta.ScopeDigest)
	md.BindInt64(6, count)
	if _, err := md.Step(); err != nil {
		return fmt.Errorf("sqlite image: metadata: %w", err)
	}
	if err := execOnce(conn, "COMMIT"); err != nil {
		return fmt.Errorf("sqlite image: commit: %w", err)
	}
	return nil
}

// execOnce runs one statement to completion.
func execOnce(conn *sqlite.Conn, query string) error {
	st, _, err := conn.PrepareTransient(query)
	if err != nil {
		return err
	}
	defer st.Finalize()
	for {
		more, err := st.Step()
		if err != nil || !more {
			return err
		}
	}
}

// bindRow binds the cells of r (§5.3 cell encodings) and its version to
// the parameters of stmt after the first `at`, and returns an estimate of
// the row's stored size (rowSize's, summed as it binds).
func bindRow(stmt *sqlite.Stmt, at int, cols []wire.Column, r Row) (int64, error) {
	if len(r.Values) != len(cols) {
		return 0, fmt.Errorf("%d values for %d columns", len(r.Values), len(cols))
	}
	if r.ServerVersion < 1 {
		return 0, fmt.Errorf("server version %d, want at least 1", r.ServerVersion)
	}
	size := int64(8)
	for i := range cols {
		p := at + i + 1
		v := &r.Values[i]
		size += cellSize(cols[i].Type, v)
		if v.Null {
			stmt.BindNull(p)
			continue
		}
		switch cols[i].Type {
		case wire.TypeString, wire.TypeJSON, wire.TypeBlobRef:
			stmt.BindText(p, v.Str)
		case wire.TypeInteger:
			stmt.BindInt64(p, v.Int)
		case wire.TypeBoolean:
			stmt.BindBool(p, v.Bool)
		case wire.TypeFloat:
			if math.IsNaN(v.Float) {
				return 0, fmt.Errorf("column %s: %w (NaN)", cols[i].Name, ErrUnrepresentable)
			}
			if v.Float == 0 && math.Signbit(v.Float) {
				// SQLite writes an integral REAL as an integer, and
				// reads it back as +0.
				return 0, fmt.Errorf("column %s: %w (negative zero)", cols[i].Name, ErrUnrepresentable)
			}
			stmt.BindFloat(p, v.Float)
		case wire.TypeBytes, wire.TypeCRDT:
			// A nil slice is an empty blob, not NULL: BindBytes binds a
			// zero-length blob for both.
			stmt.BindBytes(p, v.Bytes)
		}
	}
	stmt.BindInt64(at+len(cols)+1, r.ServerVersion)
	return size, nil
}

// rowSize estimates the bytes a row stores: its cells and version.
func rowSize(cols []wire.Column, r Row) int64 {
	size := int64(8)
	for i := range min(len(cols), len(r.Values)) {
		size += cellSize(cols[i].Type, &r.Values[i])
	}
	return size
}

// cellSize estimates the bytes a cell of type t stores.
func cellSize(t wire.ColumnType, v *wire.Value) int64 {
	switch {
	case v.Null, t == wire.TypeBoolean:
		return 1
	case t == wire.TypeString, t == wire.TypeJSON, t == wire.TypeBlobRef:
		return int64(len(v.Str))
	case t == wire.TypeBytes, t == wire.TypeCRDT:
		return int64(len(v.Bytes))
	default:
		return 8
	}
}

// checkTable refuses a table an image cannot hold: reserved or repeated
// names (SQLite compares names without regard to ASCII case), an unknown
// column type, or a primary key out of range.
func checkTable(table string, cols []wire.Column, pk int) error {
	reserved := func(name string) bool {
		l := strings.ToLower(name)
		return l == strings.ToLower(MetadataTable) || l == strings.ToLower(VersionColumn) || strings.HasPrefix(l, "sqlite_")
	}
	switch {
	case table == "" || reserved(table):
		return fmt.Errorf("sqlite image: table name %q is empty or reserved", table)
	case len(cols) == 0:
		return errors.New("sqlite image: a table needs columns")
	case pk < 0 || pk >= len(cols):
		return fmt.Errorf("sqlite image: primary key %d out of range", pk)
	}
	seen := make(map[string]bool, len(cols))
	for _, c := range cols {
		l := strings.ToLower(c.Name)
		if c.Name == "" || reserved(c.Name) || seen[l] {
			return fmt.Errorf("sqlite image: column name %q is empty, reserved or repeated", c.Name)
		}
		seen[l] = true
		if _, ok := declType(c.Type); !ok {
			return fmt.Errorf("sqlite image: column %s has unknown type %d", c.Name, c.Type)
		}
	}
	return nil
}

// createDataSQL declares the data table (§5.3).
func createDataSQL(table string, cols []wire.Column, pk int, withoutRowID bool) string {
	var sb strings.Builder
	sb.WriteString("CREATE TABLE ")
	sb.WriteString(quoteIdent(table))
	sb.WriteString(" (")
	for i, c := range cols {
		t, _ := declType(c.Type)
		sb.WriteString(quoteIdent(c.Name))
		sb.WriteByte(' ')
		sb.WriteString(t)
		if !c.Nullable {
			sb.WriteString(" NOT NULL")
		}
		if i == pk {
			sb.WriteString(" PRIMARY KEY")
		}
		sb.WriteString(", ")
	}
	sb.WriteString(quoteIdent(VersionColumn))
	sb.WriteString(" INTEGER NOT NULL)")
	if withoutRowID {
		sb.WriteString(" WITHOUT ROWID")
	}
	return sb.String()
}

// withoutRowID reports whether the data table is stored by its primary
// key alone (WITHOUT ROWID): for small rows (smallRows) when the key is
// not an INTEGER column, which is the rowid already, and is not nullable
// (a WITHOUT ROWID key refuses NULL, which a rowid table's PRIMARY KEY
// admits). A rowid table keeps a second b-tree, the key's index: for
// small rows the 100,000-row image of BenchmarkBuild100k is 7.9 MB
// instead of 9.8 and builds in ~99 ms instead of ~111, and a client reads
// it in key order without the index. Larger rows spill from a WITHOUT
// ROWID b-tree's cells much sooner than from a table's (~1,000 bytes
// against ~4,000 on a 4 KiB page): with 600-byte titles the build was
// ~10 % slower and with 2,000-byte ones ~30 % slower and 13 % larger.
func withoutRowID(cols []wire.Column, pk int, small bool) bool {
	t, _ := declType(cols[pk].Type)
	return small && t != "INTEGER" && !cols[pk].Nullable
}

// smallRows reports whether the rows of a build's first batch average at
// most maxCompactRow bytes (false for none).
func smallRows(cols []wire.Column, first []Row) bool {
	if len(first) == 0 {
		return false
	}
	var total int64
	for _, r := range first {
		total += rowSize(cols, r)
	}
	return total <= maxCompactRow*int64(len(first))
}

// maxCompactRow is the largest average row, in bytes, that counts as
// small: a twentieth of a 4 KiB page, where SQLite's documentation places
// the end of WITHOUT ROWID's advantage.
const maxCompactRow = 200

// Multi-row inserts: a statement inserts up to maxRowsPerInsert rows and
// binds at most maxVariables values (SQLITE_MAX_VARIABLE_NUMBER of the
// bundled SQLite is 32766).
const (
	maxRowsPerInsert = 64
	maxVariables     = 32766
)

// insertDataSQL inserts n rows of the data table.
func insertDataSQL(table string, cols []wire.Column, n int) string {
	var sb strings.Builder
	sb.WriteString("INSERT INTO ")
	sb.WriteString(quoteIdent(table))
	sb.WriteString(" (")
	for _, c := range cols {
		sb.WriteString(quoteIdent(c.Name))
		sb.WriteString(", ")
	}
	sb.WriteString(quoteIdent(VersionColumn))
	sb.WriteString(") VALUES ")
	row := "(" + strings.Repeat("?, ", len(cols)) + "?)"
	for i := range n {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(row)
	}
	return sb.String()
}

// createMetadataSQL declares the metadata table with exactly the columns
// of §5.3.
var createMetadataSQL = func() string {
	defs := make([]string, len(metadataColumns))
	for i, c := range metadataColumns {
		defs[i] = quoteIdent(c.Name) + " " + c.DeclType + " NOT NULL"
	}
	return "CREATE TABLE " + quoteIdent(MetadataTable) + " (" + strings.Join(defs, ", ") + ")"
}()

const insertMetadataSQL = `INSERT INTO "_syncular_segment" VALUES (?, ?, ?, ?, ?, ?)`
