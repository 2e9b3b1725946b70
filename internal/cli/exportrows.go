package cli

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

const exportUsage = `usage: syncgo export -db DB -partition P -table TABLE [-schema FILE] [-out FILE]

Writes the current rows of a table in one partition as JSON Lines (one
object per row, column name to value), read from the database without
writing to it; the format syncgo import reads back. With import, it moves
the rows of a partition to another database (from SQLite to Postgres, say):
the rows, not the commit log, so clients bootstrap on the new server.

Values: strings, numbers and booleans as JSON (a NaN or infinite float as
the string "NaN", "Infinity" or "-Infinity"); json columns as their stored
text (line breaks between tokens removed); bytes and crdt columns as base64
text; NULL as null.

  -db DB          SQLite file path or postgres:// URL (SYNCGO_DB)
  -partition P    the partition (default: default)
  -table TABLE    the table
  -schema FILE    the schema IR the database serves (default: the demo schema)
  -out FILE       where to write (default: standard output); written as
                  FILE.partial-<random> and renamed to FILE once complete
`

func runExport(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("export", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, exportUsage) }
	db := fs.String("db", envOr("SYNCGO_DB", "syncgo.db"), "")
	partition := fs.String("partition", "default", "")
	table := fs.String("table", "", "")
	schemaPath := fs.String("schema", "", "")
	out := fs.String("out", "", "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *table == "" || fs.NArg() > 0 {
		fmt.Fprint(stderr, exportUsage)
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "syncgo export: %v\n", err)
		return 1
	}
	sc, t, err := schemaTable(*schemaPath, *table)
	if err != nil {
		return fail(err)
	}
	st, err := openExistingStore(ctx, *db, true)
	if err != nil {
		return fail(err)
	}
	defer st.Close()
	// Read-only: checks that the database serves this schema, writes
	// nothing.
	if err := st.EnsureSchema(ctx, sc); err != nil {
		if m, merr := st.Marker(ctx); merr == nil && int64(m.SchemaVersion) != int64(sc.Version()) {
			// Said plainly: a read-only store's refusal to migrate
			// ("the store is read-only") does not name the versions.
			return fail(fmt.Errorf("the database holds schema version %d, -schema is version %d: export with the schema file the database's servers run (%w)",
				m.SchemaVersion, sc.Version(), err))
		}
		return fail(fmt.Errorf("the database does not serve this schema: %w", err))
	}
	w := stdout
	var part *partialFile
	if *out != "" {
		if part, err = createPartial(*out); err != nil {
			return fail(err)
		}
		defer part.discard()
		w = part.f
	}
	bw := bufio.NewWriter(w)
	codec := t.RowCodec()
	var after *string
	n := 0
	for {
		rows, err := st.ListRows(ctx, *partition, *table, after, 1000)
		if err != nil {
			return fail(err)
		}
		for _, r := range rows {
			vals, err := codec.DecodeRow(r.Payload)
			if err != nil {
				return fail(fmt.Errorf("row %s: %w", r.RowID, err))
			}
			line, err := t.AppendJSON(nil, vals)
			if err != nil {
				return fail(fmt.Errorf("row %s: %w", r.RowID, err))
			}
			bw.Write(line)
			bw.WriteByte('\n')
			n++
		}
		if len(rows) < 1000 {
			break
		}
		after = &rows[len(rows)-1].RowID
	}
	if err := bw.Flush(); err != nil {
		return fail(err)
	}
	if part != nil {
		if err := part.commit(); err != nil {
			return fail(err)
		}
	}
	fmt.Fprintf(stderr, "exported %d rows of %s in partition %s\n", n, *table, *partition)
	return 0
}

// partialFile is an export being written beside its -out file, renamed
// over it once complete: an export killed, interrupted or failed part-way
// never leaves a -out that holds some of the rows (which an import would
// take for the whole table), only the file it writes, named
// <out>.partial-<random>.
type partialFile struct {
	f      *os.File
	target string
	done   bool
}

func createPartial(target string) (*partialFile, error) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	// O_EXCL with the mode os.Create uses: the umask applies, as it did
	// to the -out file written directly.
	f, err := os.OpenFile(target+".partial-"+hex.EncodeToString(b[:]), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
	if err != nil {
		return nil, err
	}
	return &partialFile{f: f, target: target}, nil
}

// commit makes the file durable and renames it over the target.
func (p *partialFile) commit() error {
	if err := p.f.Sync(); err != nil {
		return err
	}
	if err := p.f.Close(); err != nil {
		return err
	}
	if err := os.Rename(p.f.Name(), p.target); err != nil {
		return err
	}
	p.done = true
	if d, err := os.Open(filepath.Dir(p.target)); err == nil {
		_ = d.Sync() // the rename itself durable, where the system allows
		d.Close()
	}
	return nil
}

// discard removes the file unless it was committed.
func (p *partialFile) discard() {
	if p.done {
		return
	}
	p.f.Close()
	os.Remove(p.f.Name())
}
