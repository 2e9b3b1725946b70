package store

// CoreColumn is a column a core table must have. Added marks a column
// that a later server line added: a table without it is brought up to
// date by adding it (each driver knows the column's definition); a table
// without any other column cannot be used.
type CoreColumn struct {
	Name  string
	Added bool
}

// CoreTables returns the columns of the core sync_* tables that both
// drivers create and the reference server shares, in DDL order, without
// the schema marker table (the drivers create it at different times).
// Each driver's migrations are held to it by a test.
func CoreTables() map[string][]CoreColumn {
	cols := func(names ...string) []CoreColumn {
		out := make([]CoreColumn, len(names))
		for i, n := range names {
			out[i] = CoreColumn{Name: n}
		}
		return out
	}
	return map[string][]CoreColumn{
		"sync_partitions":         cols("partition", "max_commit_seq", "horizon_seq"),
		"sync_partition_registry": cols("partition", "log_epoch", "epoch_required", "last_authenticated_at_ms"),
		"sync_row_scopes":         cols("partition", "tbl", "var", "value", "row_id"),
		// writer_version: the reference before 0.23 has none; its commits
		// keep NULL, the mark of a writer without a version (below any
		// fence).
		"sync_commits": append(cols("partition", "commit_seq", "client_id", "client_commit_id", "actor_id", "created_at_ms"),
			CoreColumn{Name: "writer_version", Added: true}),
		"sync_changes":       cols("partition", "commit_seq", "idx", "tbl", "row_id", "op", "row_version", "scopes", "payload"),
		"sync_change_scopes": cols("partition", "tbl", "var", "value", "commit_seq"),
		"sync_push_results":  cols("partition", "client_id", "client_commit_id", "result"),
		// wire_version: before 0.15 every client record was wire version 1.
		"sync_clients": append(append(cols("partition", "client_id", "actor_id"), CoreColumn{Name: "wire_version", Added: true}),
			cols("cursor", "subscriptions", "updated_at_ms")...),
		"sync_tombstones": cols("partition", "tbl", "row_id", "commit_seq"),
		"sync_backfill_checkpoints": cols("partition", "name", "schema_version", "state", "watermark",
			"owner_epoch", "observed_rows", "updated_at_ms"),
		"sync_writer_fence": cols("partition", "required_writer_version"),
		// Auth leases (§7.3), as the reference's lease store lays them out.
		"sync_leases": cols("partition", "client_id", "lease_id", "actor_id", "allowed_scopes",
			"issued_at_ms", "expires_at_ms", "revoked"),
		"sync_lease_revocations": cols("partition", "lease_id"),
	}
}
