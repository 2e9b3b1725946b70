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
		// The blob reference index (§5.9.4), as the reference declares it.
		"sync_blob_refs": cols("partition", "tbl", "row_id", "blob_id"),
		// The segment store (§5.1): one row per content address in the
		// layout of the reference's SqliteSegmentStore (whose older line
		// has no log_epoch), and its publications.
		"sync_segments": append(append(cols("segment_id", "partition"), CoreColumn{Name: "log_epoch", Added: true}),
			cols("tbl", "schema_version", "media_type", "scope_digest", "as_of_commit_seq", "row_count",
				"row_cursor", "next_row_cursor", "byte_length", "created_at_ms", "expires_at_ms", "bytes")...),
		"sync_segment_publications": cols("segment_id", "context", "partition", "log_epoch", "tbl", "schema_version",
			"media_type", "scope_digest", "as_of_commit_seq", "row_cursor", "next_row_cursor", "row_count",
			"created_at_ms", "expires_at_ms"),
		// Segments kept as their download bodies (store.SegmentBodyStore):
		// sync_segments' columns and the coding, in a table of its own
		// that server processes without bodies do not read.
		"sync_segment_bodies": cols("segment_id", "partition", "log_epoch", "tbl", "schema_version", "media_type",
			"scope_digest", "as_of_commit_seq", "row_count", "row_cursor", "next_row_cursor", "byte_length",
			"created_at_ms", "expires_at_ms", "content_encoding", "body"),
		// The database blob store (§5.9.2): blobs and their chunks.
		"sync_blob_objects": cols("partition", "blob_id", "byte_length", "media_type", "created_at_ms", "upload_id"),
		"sync_blob_chunks":  cols("upload_id", "idx", "started_at_ms", "bytes"),
		// Durable reactions (§6.9), as the reference's storage lays them
		// out.
		"sync_reactions": cols("partition", "idempotency_key", "type", "version", "payload",
			"source_client_id", "source_client_commit_id", "source_commit_seq", "created_at_ms",
			"available_at_ms", "status", "attempts", "max_attempts", "lease_owner", "lease_expires_at_ms",
			"completed_at_ms", "last_failure"),
	}
}
