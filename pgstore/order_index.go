package pgstore

import (
	"context"
	"fmt"
	"hash/fnv"

	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo/schema"
)

// Row scans read an app table in bytewise row-id order (COLLATE "C"),
// joined to the row scope key, whose row_id is COLLATE "C". A table whose
// primary key is in that order, or that has an order index, is "ordered":
// the scan walks the row scope key and the table side by side (a merge
// join) instead of probing the primary key once per row (a descent
// comparing under the database collation at every level: 0.63 of the
// 0.66 s the backends spent on a cold 100,000-row bootstrap).
//
//   - A table syncgo creates declares _sync_row_id COLLATE "C": its primary
//     key is the order (equality is the same in every deterministic
//     collation, so the keys it holds are the same). Nothing else changes:
//     no second index to maintain on each insert.
//   - A table created before (or by the reference server) keeps its
//     primary key in the database collation, and opening it at the
//     running version creates nothing; it is scanned by the primary key
//     join as before, unless the operator builds the order index, the
//     table's rows by (_sync_partition, _sync_row_id COLLATE "C"), with
//     CREATE INDEX CONCURRENTLY (docs/operations.md), which the next
//     EnsureSchema reads from the catalog. Its name does not start with
//     schema.IndexPrefix: it is no declared index, and the owned-index
//     upkeep leaves it alone.

// orderIndexPrefix starts the name of every order index.
const orderIndexPrefix = "sync_order_"

// maxIdentifier is the longest identifier Postgres keeps (NAMEDATALEN-1
// bytes); a longer one is truncated.
const maxIdentifier = 63

// orderIndexName is the name of table's order index: the prefix and the
// table's name, or, when that is too long for an identifier, a prefix of
// it and a hash of the whole name (two long names that share their start
// get two names).
func orderIndexName(table string) string {
	name := orderIndexPrefix + table
	if len(name) <= maxIdentifier {
		return name
	}
	h := fnv.New64a()
	h.Write([]byte(table))
	suffix := fmt.Sprintf("_%016x", h.Sum64())
	cut := maxIdentifier - len(suffix)
	for cut > 0 && name[cut]&0xC0 == 0x80 { // not inside a UTF-8 sequence
		cut--
	}
	return name[:cut] + suffix
}

// sqlOrderIndexes returns the tables of $1 that are ordered: the
// primary key's _sync_row_id is under "C", or the table's order index ($2,
// the same position) is there, valid and of the right key (a plain btree
// index of (_sync_partition, _sync_row_id), the second under "C"). Tables
// and indexes are resolved through the search_path like the unqualified
// statements. It reads the catalog tables alone, which takes no lock on
// the app tables (no pg_get_indexdef): a start is never queued behind DDL
// waiting on them (TestOpenUpToDateTakesNoLock).
const sqlOrderIndexes = `WITH c AS (SELECT oid FROM pg_collation WHERE collname = 'C' AND collnamespace = 'pg_catalog'::regnamespace)
SELECT n.tbl, true
  FROM unnest($1::text[], $2::text[]) AS n(tbl, ix)
 WHERE EXISTS (SELECT 1 FROM pg_attribute a, c
                WHERE a.attrelid = to_regclass(quote_ident(n.tbl)) AND a.attname = '` + colRowID + `'
                  AND a.attcollation = c.oid)
UNION ALL
SELECT n.tbl, false
  FROM unnest($1::text[], $2::text[]) AS n(tbl, ix)
  JOIN pg_class c ON c.oid = to_regclass(quote_ident(n.ix))
  JOIN pg_am am ON am.oid = c.relam
  JOIN pg_index i ON i.indexrelid = c.oid
 WHERE am.amname = 'btree' AND i.indrelid = to_regclass(quote_ident(n.tbl)) AND i.indisvalid AND i.indisready
   AND NOT i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL AND i.indnkeyatts = 2
   AND array(SELECT a.attname::text
               FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
               JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
              ORDER BY k.ord) = ARRAY['` + colPartition + `', '` + colRowID + `']
   AND i.indcollation[1] = (SELECT oid FROM pg_collation WHERE collname = 'C' AND collnamespace = 'pg_catalog'::regnamespace)`

// orderKind is how an app table is in bytewise row-id order.
type orderKind int

const (
	unordered  orderKind = iota
	orderIndex           // by its order index; the key is in the database collation
	orderKey             // by its primary key (_sync_row_id COLLATE "C")
)

// orderIndexes reads how c's tables are ordered (absent: unordered).
func orderIndexes(ctx context.Context, q querier, c *schema.Compiled) (map[string]orderKind, error) {
	tables := make([]string, len(c.Tables()))
	names := make([]string, len(tables))
	for i, t := range c.Tables() {
		tables[i], names[i] = t.Name(), orderIndexName(t.Name())
	}
	rows, err := q.Query(ctx, sqlOrderIndexes, tables, names)
	if err != nil {
		return nil, fmt.Errorf("read order indexes: %w", err)
	}
	out := map[string]orderKind{}
	var (
		table string
		key   bool
	)
	if _, err := pgx.ForEachRow(rows, []any{&table, &key}, func() error {
		kind := orderIndex
		if key {
			kind = orderKey
		}
		out[table] = max(out[table], kind)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read order indexes: %w", err)
	}
	return out, nil
}
