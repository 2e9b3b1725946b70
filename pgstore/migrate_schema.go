package pgstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// migrateSchema brings a database whose marker is older than c (or
// absent) to c, in one transaction under the migration locks (lock.go):
// the advisory lock, then LOCK TABLE sync_partitions IN EXCLUSIVE MODE,
// which conflicts with the row lock every Write (and ActivateCheckpoint,
// PruneThrough) takes on its partition's sync_partitions row, from pgstore
// or from the reference server, so the bump waits for the writers inside
// and every new writer blocks at its first statement until the bump
// commits (plain reads go on). A lock wait that times out or deadlocks
// retries the whole transaction.
//
// Under the locks: the core steps still missing, then the plan again (the
// barrier, for checkpoints declared meanwhile; the marker, which another
// server may have migrated: then it is only checked), CREATE TABLE for new
// tables, ADD COLUMN for appended (always nullable) columns, the declared
// indexes, the rewrite of the stored rows and logged changes of the tables
// that grew, the marker, the declared checkpoints (rows and fences) and
// every partition's writer fence raised to c's version. Any failure rolls
// all of it back. A writer that was waiting then takes the lock, and its
// append is refused by the fence trigger when it runs the older version.
func (s *Store) migrateSchema(ctx context.Context, c *schema.Compiled, decls []store.CheckpointDeclaration) error {
	layout, err := c.Layout().MarshalJSON()
	if err != nil {
		return err
	}
	nowMs := time.Now().UnixMilli()
	return s.withMigrationLock(ctx, "schema bump", func(ctx context.Context, tx pgx.Tx) error {
		if s.cfg.migrationLocked != nil {
			s.cfg.migrationLocked()
		}
		core, err := planCore(ctx, tx)
		if err != nil {
			return err
		}
		if err := applySteps(ctx, tx, core); err != nil {
			return err
		}
		p, err := planSchema(ctx, tx, c, decls, planOptions{locked: true})
		if err != nil {
			return err
		}
		switch p.action {
		case store.SchemaNone:
			return nil // migrated by another server meanwhile
		case store.SchemaRefuse, store.SchemaUpgradeNeeded:
			return p.refusal
		}
		cols, err := physicalColumns(ctx, tx, c)
		if err != nil {
			return err
		}
		ddl, err := schemaDDL(ctx, tx, c, cols)
		if err != nil {
			return err
		}
		if len(ddl) > 0 {
			if _, err := tx.Exec(ctx, strings.Join(ddl, ";\n")); err != nil {
				return fmt.Errorf("create tables: %w", err)
			}
		}
		for _, t := range c.Tables() {
			if err := rewriteTable(ctx, tx, t, p.marker.Layout, cols[t.Name()]); err != nil {
				return fmt.Errorf("rewrite table %q: %w", t.Name(), err)
			}
		}
		if _, err := tx.Exec(ctx, sqlPutMarker, int64(c.Version()), string(layout)); err != nil {
			return fmt.Errorf("write marker: %w", err)
		}
		if err := installCheckpoints(ctx, tx, decls, c.Version(), nowMs); err != nil {
			return err
		}
		s.log.InfoContext(ctx, "pgstore: schema migrated", "from", p.marker.SchemaVersion, "to", c.Version(), "checkpoints", len(decls))
		return nil
	})
}

// prebuildIndexes builds, before a schema bump takes the migration locks,
// the declared indexes the bump would create on tables and columns that
// exist already, each with CREATE INDEX CONCURRENTLY in a statement of its
// own: the processes already running keep writing while the table is read
// (the build waits for their open transactions, it does not hold them
// back), and the bump finds the index built. Under the locks, the build of
// an index on a large table held every writer of every partition for as
// long as it took. A unique index is enforced on the older processes'
// writes from the start of its build, seconds before the bump would
// enforce it on every writer; one whose build meets a duplicate is dropped
// again (a failed concurrent build leaves an invalid index that still
// checks new rows) and the bump reports the duplicate, as before. Left to
// the bump: indexes of new tables or columns, an owned index whose
// declaration changed, and a build that fails. First, owned indexes that an interrupted concurrent
// build left invalid, and that no session is building, are dropped: the
// catalog would take them for built.
func (s *Store) prebuildIndexes(ctx context.Context, c *schema.Compiled) error {
	// Another process's concurrent build (a second new process started
	// during the first one's) is waited for, holding no lock: under the
	// locks the bump would take the unfinished index for missing and
	// drop and build it again, holding the writers for the build.
	if err := s.waitIndexBuilds(ctx, c); err != nil {
		return err
	}
	if err := s.dropAbandoned(ctx, sqlAbandonedOwnedIndexes, tableNames(c), schema.IndexPrefix); err != nil {
		return err
	}
	if err := s.buildDeclaredIndexes(ctx, c); err != nil {
		return err
	}
	// A build ours skipped (CREATE INDEX CONCURRENTLY IF NOT EXISTS of an
	// index another process began meanwhile) is waited for too.
	return s.waitIndexBuilds(ctx, c)
}

// sqlOwnedIndexBuilds counts the owned indexes (named with the prefix $2)
// of the app tables $1 that a session is building.
const sqlOwnedIndexBuilds = `SELECT count(*) FROM unnest($1::text[]) AS n(name)
  JOIN pg_index i ON i.indrelid = to_regclass(quote_ident(n.name))
  JOIN pg_class c ON c.oid = i.indexrelid
  WHERE starts_with(c.relname, $2) AND NOT i.indisvalid
    AND EXISTS (SELECT 1 FROM pg_stat_progress_create_index p WHERE p.index_relid = i.indexrelid)`

// indexBuildPoll is how often waitIndexBuilds looks again.
const indexBuildPoll = 100 * time.Millisecond

// waitIndexBuilds returns once no session is building an owned index of
// c's tables, or when ctx ends.
func (s *Store) waitIndexBuilds(ctx context.Context, c *schema.Compiled) error {
	names := tableNames(c)
	logged := false
	for {
		var n int64
		if err := s.pool.QueryRow(ctx, sqlOwnedIndexBuilds, names, schema.IndexPrefix).Scan(&n); err != nil {
			return fmt.Errorf("read index builds: %w", err)
		}
		if n == 0 {
			return nil
		}
		if !logged {
			s.log.InfoContext(ctx, "pgstore: waiting for another process's concurrent index build before the schema bump", "builds", n)
			logged = true
		}
		t := time.NewTimer(indexBuildPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// buildDeclaredIndexes builds the declared indexes missing on tables and
// columns that exist, concurrently (prebuildIndexes).
func (s *Store) buildDeclaredIndexes(ctx context.Context, c *schema.Compiled) error {
	type build struct{ name, sql string }
	var builds []build
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		cols, err := physicalColumns(ctx, tx, c)
		if err != nil {
			return err
		}
		owned, err := ownedIndexes(ctx, tx, c)
		if err != nil {
			return err
		}
		for _, t := range c.Tables() {
			have, exists := cols[t.Name()]
			if !exists {
				continue
			}
			for _, d := range declaredIndexes(t) {
				taken := slices.ContainsFunc(owned[t.Name()], func(o ownedIndex) bool { return o.name == d.name })
				present := !slices.ContainsFunc(d.columns, func(col string) bool { _, ok := have[col]; return !ok })
				if taken || !present {
					continue
				}
				builds = append(builds, build{quoteIdent(d.name), d.buildSQL(quoteIdent(t.Name()), true)})
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("plan index builds: %w", err)
	}
	for _, b := range builds {
		if s.buildConcurrently(ctx, b.name, b.sql) {
			s.log.InfoContext(ctx, "pgstore: declared index built concurrently before the schema bump", "index", b.name)
		}
	}
	return nil
}

// tableNames are the names of c's tables.
func tableNames(c *schema.Compiled) []string {
	names := make([]string, len(c.Tables()))
	for i, t := range c.Tables() {
		names[i] = t.Name()
	}
	return names
}

// schemaDDL returns the statements that bring the app tables of c to
// their declared shape: CREATE TABLE (_sync_row_id under "C", see
// order_index.go), ADD COLUMN for missing columns, and the declared indexes (an owned sync_ix_ index that differs from its
// declaration, or is no longer declared, is dropped and re-created).
func schemaDDL(ctx context.Context, tx pgx.Tx, c *schema.Compiled, cols map[string]map[string]physicalColumn) ([]string, error) {
	owned, err := ownedIndexes(ctx, tx, c)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, t := range c.Tables() {
		q := quoteIdent(t.Name())
		have, exists := cols[t.Name()]
		if !exists {
			defs := []string{quoteIdent(colPartition) + " TEXT NOT NULL", quoteIdent(colRowID) + ` TEXT COLLATE "C" NOT NULL`}
			if t.Materialize() {
				for _, col := range t.Columns() {
					defs = append(defs, quoteIdent(col.Name)+" "+sqlType(col.Type))
				}
			}
			defs = append(defs, quoteIdent(colServerVersion)+" BIGINT NOT NULL", quoteIdent(colScopes)+" JSONB NOT NULL",
				quoteIdent(colPayload)+" BYTEA NOT NULL", quoteIdent(colColumnVersions)+" BYTEA",
				"PRIMARY KEY ("+quoteIdent(colPartition)+", "+quoteIdent(colRowID)+")")
			out = append(out, "CREATE TABLE IF NOT EXISTS "+q+" ("+strings.Join(defs, ", ")+")")
		} else {
			if _, ok := have[colColumnVersions]; !ok {
				out = append(out, "ALTER TABLE "+q+" ADD COLUMN IF NOT EXISTS "+quoteIdent(colColumnVersions)+" BYTEA")
			}
			for _, col := range t.Columns() {
				if _, ok := have[col.Name]; !ok && t.Materialize() {
					out = append(out, "ALTER TABLE "+q+" ADD COLUMN IF NOT EXISTS "+quoteIdent(col.Name)+" "+sqlType(col.Type))
				}
			}
		}
		// An invalid owned index (a concurrent build that did not finish)
		// counts as missing: CREATE INDEX IF NOT EXISTS would keep it.
		declared := declaredIndexes(t)
		built := func(d ownedIndex) bool {
			return slices.ContainsFunc(owned[t.Name()], func(o ownedIndex) bool { return o.valid && o.equal(d) })
		}
		for _, o := range owned[t.Name()] {
			if !o.valid || !slices.ContainsFunc(declared, o.equal) {
				out = append(out, "DROP INDEX IF EXISTS "+quoteIdent(o.name))
			}
		}
		for _, d := range declared {
			if !built(d) {
				out = append(out, d.buildSQL(q, false))
			}
		}
	}
	return out, nil
}

// ownedIndex is an index named with schema.IndexPrefix.
type ownedIndex struct {
	name    string
	unique  bool
	columns []string
	// valid is pg_index.indisvalid: false for an index a concurrent build
	// has not finished (or left when its process died). Not compared by
	// equal.
	valid bool
}

func (o ownedIndex) equal(p ownedIndex) bool {
	return o.name == p.name && o.unique == p.unique && slices.Equal(o.columns, p.columns)
}

// declaredIndexes are the indexes a table declares, in the storage's
// shape: led by _sync_partition; none when the table is not materialized.
func declaredIndexes(t *schema.CompiledTable) []ownedIndex {
	if !t.Materialize() {
		return nil
	}
	var out []ownedIndex
	for _, ix := range t.Indexes() {
		out = append(out, ownedIndex{name: ix.PhysicalName, unique: ix.Unique,
			columns: append([]string{colPartition}, ix.Columns...)})
	}
	return out
}

// buildSQL creates the index on the quoted table, with CREATE INDEX
// CONCURRENTLY when concurrently is set.
func (o ownedIndex) buildSQL(table string, concurrently bool) string {
	quoted := make([]string, len(o.columns))
	for i, col := range o.columns {
		quoted[i] = quoteIdent(col)
	}
	stmt := "CREATE "
	if o.unique {
		stmt += "UNIQUE "
	}
	stmt += "INDEX "
	if concurrently {
		stmt += "CONCURRENTLY "
	}
	return stmt + "IF NOT EXISTS " + quoteIdent(o.name) + " ON " + table + " (" + strings.Join(quoted, ", ") + ")"
}

const sqlOwnedIndexes = `SELECT n.name, c.relname, i.indisunique, i.indisvalid,
       array(SELECT a.attname::text
               FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
               JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
              ORDER BY k.ord)
  FROM unnest($1::text[]) AS n(name)
  JOIN pg_index i ON i.indrelid = to_regclass(quote_ident(n.name))
  JOIN pg_class c ON c.oid = i.indexrelid
 WHERE starts_with(c.relname, $2)`

// ownedIndexes reads the owned indexes of c's tables, by table.
func ownedIndexes(ctx context.Context, tx pgx.Tx, c *schema.Compiled) (map[string][]ownedIndex, error) {
	rows, err := tx.Query(ctx, sqlOwnedIndexes, tableNames(c), schema.IndexPrefix)
	if err != nil {
		return nil, fmt.Errorf("read indexes: %w", err)
	}
	out := map[string][]ownedIndex{}
	var table string
	var o ownedIndex
	_, err = pgx.ForEachRow(rows, []any{&table, &o.name, &o.unique, &o.valid, &o.columns}, func() error {
		out[table] = append(out[table], o)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read indexes: %w", err)
	}
	return out, nil
}

// rewriteBatch is the number of rows a migration rewrites per round trip.
const rewriteBatch = 500

// rewriteTable re-encodes the stored payloads of a table whose layout grew
// (decoding with the stored layout, appending NULLs for the new columns)
// with its logged changes, and fills its typed columns from the payloads
// when they grew or were missing physically; a table needing neither is
// left alone.
func rewriteTable(ctx context.Context, tx pgx.Tx, t *schema.CompiledTable, old schema.Layout, have map[string]physicalColumn) error {
	oldCols, inOld := old.Table(t.Name())
	if !inOld || have == nil {
		return nil // a new table: no rows to migrate
	}
	grew := len(oldCols) < len(t.Columns())
	backfill := false
	if t.Materialize() {
		for _, c := range oldCols {
			if _, ok := have[c.Name]; !ok {
				backfill = true
			}
		}
	}
	if !grew && !backfill {
		return nil
	}
	if !backfill {
		return appendNullColumns(ctx, tx, t, len(oldCols))
	}
	decode := t.RowCodec()
	if grew {
		wc := make([]wire.Column, len(oldCols))
		for i, c := range oldCols {
			wc[i] = wire.Column{Name: c.Name, Type: c.Type, Nullable: c.Nullable}
		}
		codec, err := wire.NewRowCodec(wc, t.Columns()[t.PrimaryKey()].Name)
		if err != nil {
			return fmt.Errorf("stored layout: %w", err)
		}
		decode = codec
	}
	reencode := func(payload []byte) ([]byte, []wire.Value, error) {
		vals, err := decode.DecodeRow(payload)
		if err != nil {
			return nil, nil, fmt.Errorf("decode stored row: %w", err)
		}
		for len(vals) < len(t.Columns()) {
			vals = append(vals, wire.Value{Null: true})
		}
		out, err := t.RowCodec().AppendRow(nil, vals)
		if err != nil {
			return nil, nil, fmt.Errorf("encode row: %w", err)
		}
		return out, vals, nil
	}
	if err := rewriteRows(ctx, tx, newTableSQL(t), reencode); err != nil {
		return err
	}
	if grew {
		return rewriteChanges(ctx, tx, t.Name(), reencode)
	}
	return nil
}

// appendNullColumns brings the stored payloads of table t, encoded with
// its first n columns, and its logged upserts to t's layout, in which the
// columns past n are NULL: one UPDATE per table in the database, without
// a round trip per page of rows. A row's encoding (§2.4) is its null
// bitmap, one bit per column, set for NULL, followed by the values of the
// non-null columns, so appending NULL columns sets their bits and leaves
// the values as they are (TestAppendNullColumnsAsTheCodec checks it
// against the codec). The typed columns added with them are NULL already.
// It runs under the migration's locks, which hold every writer: decoding
// and encoding every row in the process, a page per round trip, held them
// about 1.6 times as long (100,000 rows and as many logged changes).
func appendNullColumns(ctx context.Context, tx pgx.Tx, t *schema.CompiledTable, n int) error {
	expr := appendNullsSQL(quoteIdent(colPayload), n, len(t.Columns()))
	if _, err := tx.Exec(ctx, "UPDATE "+quoteIdent(t.Name())+" SET "+quoteIdent(colPayload)+" = "+expr); err != nil {
		return fmt.Errorf("rows: %w", err)
	}
	if _, err := tx.Exec(ctx, "UPDATE sync_changes SET payload = "+appendNullsSQL("payload", n, len(t.Columns()))+
		" WHERE tbl = $1 AND payload IS NOT NULL", t.Name()); err != nil {
		return fmt.Errorf("changes: %w", err)
	}
	return nil
}

// appendNullsSQL is the SQL expression that turns the bytea column col, a
// row encoded with n columns, into the same row with columns n to m-1
// appended as NULL: the null bits of those columns set in the bitmap's
// last byte and in the bytes the bitmap grows by, the values after the
// bitmap unchanged.
func appendNullsSQL(col string, n, m int) string {
	had := (n + 7) / 8
	prefix := fmt.Sprintf("substring(%s from 1 for %d)", col, had)
	if r := n % 8; r != 0 {
		var mask byte
		for i := r; i < 8 && n-r+i < m; i++ {
			mask |= 1 << i
		}
		prefix = fmt.Sprintf("set_byte(%s, %d, get_byte(%s, %d) | %d)", prefix, had-1, col, had-1, mask)
	}
	var grown []byte
	for i := had * 8; i < m; i++ {
		if i%8 == 0 {
			grown = append(grown, 0)
		}
		grown[len(grown)-1] |= 1 << (i % 8)
	}
	if len(grown) > 0 {
		prefix += fmt.Sprintf(` || '\x%x'::bytea`, grown)
	}
	return fmt.Sprintf("%s || substring(%s from %d)", prefix, col, had+1)
}

// reencodeFunc re-encodes a stored payload in the running layout and
// returns it with its values.
type reencodeFunc func(payload []byte) ([]byte, []wire.Value, error)

// rewriteRows rewrites the payload and typed columns of every row of a
// table, a page at a time in primary-key order.
func rewriteRows(ctx context.Context, tx pgx.Tx, ts *tableSQL, reencode reencodeFunc) error {
	update := rewriteSQL(ts)
	var afterPartition, afterRow *string
	for {
		page, err := readRewritePage(ctx, tx, ts, afterPartition, afterRow)
		if err != nil || len(page) == 0 {
			return err
		}
		b := &pgx.Batch{}
		for _, r := range page {
			payload, vals, err := reencode(r.payload)
			if err != nil {
				return fmt.Errorf("row %q: %w", r.rowID, err)
			}
			args := []any{r.partition, r.rowID, payload}
			if len(ts.typed) > 0 {
				typed, err := ts.typedArgs(vals)
				if err != nil {
					return err
				}
				args = append(args, typed...)
			}
			b.Queue(update, args...)
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("update rows: %w", err)
		}
		if len(page) < rewriteBatch {
			return nil
		}
		last := page[len(page)-1]
		afterPartition, afterRow = &last.partition, &last.rowID
	}
}

// Logged changes of a table, a page at a time in primary-key order, and
// their new payloads, one statement per page.
const (
	sqlChangesToRewrite = `SELECT partition, commit_seq, idx, payload FROM sync_changes
 WHERE (partition, commit_seq, idx) > ($1, $2, $3) AND tbl = $4 AND payload IS NOT NULL
 ORDER BY partition, commit_seq, idx LIMIT $5`
	sqlRewriteChanges = `UPDATE sync_changes c SET payload = u.payload
  FROM unnest($1::text[], $2::int8[], $3::int4[], $4::bytea[]) AS u(partition, commit_seq, idx, payload)
 WHERE c.partition = u.partition AND c.commit_seq = u.commit_seq AND c.idx = u.idx`
)

// rewriteChanges re-encodes the logged upserts of a table: the pull and
// the realtime fan-out serve them verbatim, so they must be in the layout
// the running server's clients decode.
func rewriteChanges(ctx context.Context, tx pgx.Tx, table string, reencode reencodeFunc) error {
	lastPartition, lastSeq, lastIdx := "", int64(-1), int32(-1)
	for {
		rows, err := tx.Query(ctx, sqlChangesToRewrite, lastPartition, lastSeq, lastIdx, table, rewriteBatch)
		if err != nil {
			return fmt.Errorf("read changes: %w", err)
		}
		var (
			partitions []string
			seqs       []int64
			idxs       []int32
			payloads   [][]byte
			partition  string
			seq        int64
			idx        int32
			payload    []byte
		)
		_, err = pgx.ForEachRow(rows, []any{&partition, &seq, &idx, &payload}, func() error {
			out, _, err := reencode(payload)
			if err != nil {
				return fmt.Errorf("change %d/%d: %w", seq, idx, err)
			}
			partitions, seqs, idxs, payloads = append(partitions, partition), append(seqs, seq), append(idxs, idx), append(payloads, out)
			return nil
		})
		if err != nil {
			return fmt.Errorf("read changes: %w", err)
		}
		if len(seqs) == 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, sqlRewriteChanges, partitions, seqs, idxs, payloads); err != nil {
			return fmt.Errorf("update changes: %w", err)
		}
		if len(seqs) < rewriteBatch {
			return nil
		}
		lastPartition, lastSeq, lastIdx = partitions[len(partitions)-1], seqs[len(seqs)-1], idxs[len(idxs)-1]
	}
}

type rewriteRow struct {
	partition, rowID string
	payload          []byte
}

// readRewritePage reads the next page of a table in primary-key order.
func readRewritePage(ctx context.Context, tx pgx.Tx, ts *tableSQL, afterPartition, afterRow *string) ([]rewriteRow, error) {
	key := quoteIdent(colPartition) + ", " + quoteIdent(colRowID)
	sql := "SELECT " + key + ", " + quoteIdent(colPayload) + " FROM " + ts.quoted
	args := []any{}
	if afterPartition != nil {
		sql += " WHERE (" + key + ") > ($1, $2)"
		args = append(args, *afterPartition, *afterRow)
	}
	sql += fmt.Sprintf(" ORDER BY %s LIMIT %d", key, rewriteBatch)
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	var page []rewriteRow
	var r rewriteRow
	_, err = pgx.ForEachRow(rows, []any{&r.partition, &r.rowID, &r.payload}, func() error {
		page = append(page, rewriteRow{r.partition, r.rowID, r.payload})
		return nil
	})
	return page, err
}

// rewriteSQL updates a row's payload and typed columns by key.
func rewriteSQL(ts *tableSQL) string {
	sets := []string{quoteIdent(colPayload) + " = $3"}
	for i, c := range ts.typed {
		sets = append(sets, fmt.Sprintf("%s = $%d", quoteIdent(c.Name), i+4))
	}
	return "UPDATE " + ts.quoted + " SET " + strings.Join(sets, ", ") +
		" WHERE " + quoteIdent(colPartition) + " = $1 AND " + quoteIdent(colRowID) + " = $2"
}
