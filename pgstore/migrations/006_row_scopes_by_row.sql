-- An index the reference's DDL does not have: a row's scope index
-- entries, which every upsert and delete of the row cleans up. The primary
-- key leads with the scope variable and value, so without it the cleanup
-- read every entry of the table in the partition (10 ms per row at 70,000
-- rows). A database that lacks it gets it at Open (core.go), built
-- concurrently (CREATE INDEX CONCURRENTLY): the running writers are not
-- held while it is built.
--
-- row_id is indexed under the database's default collation, not the
-- column's "C" (equality is the same: bytewise), and the cleanup compares
-- under it: so the row scan, which ranges and orders by row_id COLLATE
-- "C", cannot take this index for the primary key's (its order would come
-- with a filter on the scope value, reading the whole table for a
-- selective value). On a table the reference created, the column is in the
-- default collation already.
CREATE INDEX IF NOT EXISTS sync_row_scopes_by_row
  ON sync_row_scopes(partition, tbl, row_id COLLATE "default");
