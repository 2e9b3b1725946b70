package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncgo/syncgo/pgstore"
	"github.com/syncgo/syncgo/schema"
)

// pgDatabases keeps an instance's databases as schemas of one Postgres
// database, named syncgo_conformance_<random>_<n>, with its backup in
// syncgo_conformance_<random>_backup. remove drops them all.
type pgDatabases struct {
	admin  *pgxpool.Pool   // the harness's; runs the DDL and the copies
	base   *pgxpool.Config // the harness's URL, parsed
	sc     *schema.Compiled
	logger *slog.Logger
	prefix string

	generation int
	live       string          // the schema open returned last
	schemas    []string        // made so far, backups included
	pools      []*pgxpool.Pool // one per store opened
}

// pgInstanceConns bounds each instance store's pool: the catalog runs one
// scenario at a time, each with a few clients.
const pgInstanceConns = 4

func newPGDatabases(admin *pgxpool.Pool, base *pgxpool.Config, sc *schema.Compiled, logger *slog.Logger) (*pgDatabases, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	return &pgDatabases{admin: admin, base: base, sc: sc, logger: logger,
		prefix: "syncgo_conformance_" + hex.EncodeToString(b[:])}, nil
}

func (d *pgDatabases) makeSchema(ctx context.Context, name string) error {
	if _, err := d.admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		return err
	}
	d.schemas = append(d.schemas, name)
	return nil
}

// openIn opens a store on a pool of its own whose connections work in
// schema name. Commits are not flushed before they are acknowledged
// (synchronous_commit off): like the SQLite instances, these databases
// are thrown away.
func (d *pgDatabases) openIn(ctx context.Context, name string) (*pgstore.Store, error) {
	cfg := d.base.Copy()
	cfg.MaxConns = pgInstanceConns
	cfg.ConnConfig.RuntimeParams["search_path"] = name
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	d.pools = append(d.pools, pool)
	return pgstore.Open(ctx, pgstore.Config{Pool: pool, Logger: d.logger})
}

func (d *pgDatabases) open(ctx context.Context, from string) (backing, error) {
	d.generation++
	name := d.prefix + "_" + strconv.Itoa(d.generation)
	if err := d.makeSchema(ctx, name); err != nil {
		return nil, err
	}
	st, err := d.openIn(ctx, name)
	if err != nil {
		return nil, err
	}
	if from != "" {
		// The tables first, as the instance's schema makes them; then the
		// backup's rows into them, read by a store opened afterwards so
		// that nothing it keeps in memory predates them.
		err := st.EnsureSchema(ctx, d.sc)
		st.Close()
		if err == nil {
			err = d.copyTables(ctx, from, name)
		}
		if err != nil {
			return nil, fmt.Errorf("restore backup: %w", err)
		}
		if st, err = d.openIn(ctx, name); err != nil {
			return nil, err
		}
	}
	d.live = name
	return st, nil
}

// backup copies every table of the live schema, in one snapshot, into
// the backup schema.
func (d *pgDatabases) backup(ctx context.Context) (string, error) {
	name := d.prefix + "_backup"
	quoted := pgx.Identifier{name}.Sanitize()
	if _, err := d.admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+quoted+" CASCADE"); err != nil {
		return "", err
	}
	if err := d.makeSchema(ctx, name); err != nil {
		return "", err
	}
	err := pgx.BeginTxFunc(ctx, d.admin, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		tables, err := baseTables(ctx, tx, d.live)
		if err != nil {
			return err
		}
		for _, t := range tables {
			if _, err := tx.Exec(ctx, "CREATE TABLE "+pgx.Identifier{name, t}.Sanitize()+
				" AS TABLE "+pgx.Identifier{d.live, t}.Sanitize()); err != nil {
				return fmt.Errorf("copy %s: %w", t, err)
			}
		}
		return nil
	})
	return name, err
}

// copyTables replaces the rows of every table of schema to with those of
// the same table in schema from, column by column (generated columns
// compute their own).
func (d *pgDatabases) copyTables(ctx context.Context, from, to string) error {
	return pgx.BeginFunc(ctx, d.admin, func(tx pgx.Tx) error {
		// The driver's triggers name its tables unqualified.
		if _, err := tx.Exec(ctx, "SELECT set_config('search_path', $1, true)", pgx.Identifier{to}.Sanitize()); err != nil {
			return err
		}
		tables, err := baseTables(ctx, tx, from)
		if err != nil {
			return err
		}
		for _, t := range tables {
			var cols string
			if err := tx.QueryRow(ctx, `SELECT coalesce(string_agg(quote_ident(column_name), ', ' ORDER BY ordinal_position), '')
FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 AND is_generated = 'NEVER'`, to, t).Scan(&cols); err != nil {
				return err
			}
			if cols == "" {
				return fmt.Errorf("table %s of the backup is not in the restored schema", t)
			}
			dst, src := pgx.Identifier{to, t}.Sanitize(), pgx.Identifier{from, t}.Sanitize()
			if _, err := tx.Exec(ctx, "TRUNCATE "+dst); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "INSERT INTO "+dst+" ("+cols+") SELECT "+cols+" FROM "+src); err != nil {
				return fmt.Errorf("copy %s: %w", t, err)
			}
		}
		return nil
	})
}

func baseTables(ctx context.Context, tx pgx.Tx, schemaName string) ([]string, error) {
	rows, err := tx.Query(ctx, `SELECT table_name FROM information_schema.tables
WHERE table_schema = $1 AND table_type = 'BASE TABLE' ORDER BY table_name`, schemaName)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

func (d *pgDatabases) remove() error {
	for _, p := range d.pools {
		p.Close()
	}
	d.pools = nil
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	for _, s := range d.schemas {
		if _, err := d.admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s}.Sanitize()+" CASCADE"); err != nil {
			errs = append(errs, fmt.Errorf("drop schema %s: %w", s, err))
		}
	}
	d.schemas = nil
	return errors.Join(errs...)
}
