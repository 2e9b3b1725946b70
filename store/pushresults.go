package store

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
)

// PushResultKey is the primary key of a push-result journal row
// (sync_push_results): the keyset position of a journal prune.
type PushResultKey struct {
	Partition, ClientID, ClientCommitID string
}

// PushResultPrune reports one batch of a journal prune.
type PushResultPrune struct {
	// Examined is the number of journal rows the batch read; Deleted
	// those of them it deleted.
	Examined, Deleted int64
	// Last is the key of the last row examined: the next batch starts
	// after it. Meaningless when Done.
	Last PushResultKey
	// Done: the batch reached the end of the journal; the next pass
	// starts again from its beginning.
	Done bool
	// Skipped: another process was pruning the journal (Postgres), so
	// this batch examined nothing; the caller tries again next pass.
	Skipped bool
}

// PushResultPruner is implemented by stores whose push-result journal
// (§2.3's idempotency records) can be pruned by age.
type PushResultPruner interface {
	// PrunePushResults examines the next limit journal rows, in primary
	// key order, after after (from the first row when after is nil), and
	// deletes those whose record's recordedAtMs is before beforeMs, in
	// one short transaction. Rows without a recorded time, or whose
	// record does not decode, are kept. Deleting a row another process
	// deleted first is harmless.
	PrunePushResults(ctx context.Context, after *PushResultKey, beforeMs int64, limit int) (PushResultPrune, error)
}

// PushRecordedAt returns the recordedAtMs of a stored push record's JSON
// document (or of a JSON string holding that document), and false when the document has none (or zero, which the
// encoder omits) or does not decode.
func PushRecordedAt(doc []byte) (int64, bool) {
	if t := bytes.TrimLeft(doc, " \t\r\n"); len(t) > 0 && t[0] == '"' {
		// The reference server's form on Postgres: a JSONB string whose
		// content is the record's JSON text (pgstore/json.go).
		var inner string
		if err := json.Unmarshal(t, &inner); err != nil {
			return 0, false
		}
		doc = []byte(inner)
	}
	var in struct {
		RecordedAtMs json.RawMessage `json:"recordedAtMs"`
	}
	if err := json.Unmarshal(doc, &in); err != nil || len(in.RecordedAtMs) == 0 {
		return 0, false
	}
	// A number only: null, a string or anything else is no recorded time.
	v, err := strconv.ParseInt(string(in.RecordedAtMs), 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(string(in.RecordedAtMs), 64)
		if ferr != nil {
			return 0, false
		}
		v = int64(f)
	}
	if v <= 0 {
		return 0, false
	}
	return v, true
}
