package store

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
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
	// From is where the batch started: after this key, or at the
	// journal's first row when nil.
	From *PushResultKey
}

// PushResultsPosition is the journal prune's stored position, which
// ResumePushResultsPrune reads and writes (see PushResultsPositionName).
type PushResultsPosition struct {
	// Stored: a position is stored. Without one, a resumed batch starts
	// from its caller's fallback.
	Stored bool
	// After is the key the next batch starts after; nil: the journal's
	// first row (the walk reached the end, and starts over).
	After *PushResultKey
	// Laps is how many times the walk reached the journal's end;
	// Examined is the rows examined since the current lap began.
	Laps, Examined int64
	// UpdatedAtMs is when the last batch stored it.
	UpdatedAtMs int64
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
	// ResumePushResultsPrune is PrunePushResults from the stored
	// position, the end of the last batch a resumed prune of any process
	// ran on the database (after fallback when none is stored), and
	// stores the batch's end in the batch's own write: its last key, or
	// the journal's start when the batch reached the end. A key too long
	// for the driver to store clears the stored position instead, so
	// that each process goes on from its own fallback.
	ResumePushResultsPrune(ctx context.Context, fallback *PushResultKey, beforeMs int64, limit int) (PushResultPrune, error)
	// PushResultsPosition reads the stored position.
	PushResultsPosition(ctx context.Context) (PushResultsPosition, error)
}

// The journal prune's position is stored as one row of
// sync_backfill_checkpoints, a table every layout since the reference's
// 0.23 has, so that storing it changes no layout: the empty partition (never a
// partition: partitions are non-empty identifiers), schema_version 0
// (never a schema version) and state 'activated', which the migration
// barrier and the serve gate (of this server, its older versions and the
// reference) pass over, and name PushResultsPositionName for the
// journal's start, or that name, ':' and the key (EncodePushResultsPosition).
// watermark holds the laps, observed_rows the rows examined in the
// current lap. Older servers ignore the row.
const PushResultsPositionName = "syncgo.push_results_prune"

// NextPushResultsPosition is the position a resumed batch res stores,
// from the one it read (stored): after its last key, or the journal's
// start, one lap more, when it reached the end.
func NextPushResultsPosition(stored PushResultsPosition, res PushResultPrune, nowMs int64) PushResultsPosition {
	next := PushResultsPosition{Stored: true, Laps: stored.Laps, Examined: stored.Examined + res.Examined, UpdatedAtMs: nowMs}
	if res.Done {
		next.Laps++
		next.Examined = 0
		return next
	}
	last := res.Last
	next.After = &last
	return next
}

// EncodePushResultsPosition returns the stored name of a position: each
// part of the key as its byte length in decimal, ':' and its bytes, so
// that any bytes round-trip.
func EncodePushResultsPosition(after *PushResultKey) string {
	if after == nil {
		return PushResultsPositionName
	}
	var b strings.Builder
	b.Grow(len(PushResultsPositionName) + 1 + len(after.Partition) + len(after.ClientID) + len(after.ClientCommitID) + 12)
	b.WriteString(PushResultsPositionName)
	b.WriteByte(':')
	for _, part := range [...]string{after.Partition, after.ClientID, after.ClientCommitID} {
		b.WriteString(strconv.Itoa(len(part)))
		b.WriteByte(':')
		b.WriteString(part)
	}
	return b.String()
}

// ScanPushResultsPosition reads the stored position's row (name,
// watermark, observed_rows, updated_at_ms) with scan, a driver's
// Row.Scan; noRows reports the driver's error for no row. No row, or a
// name that is not a position's, is no position.
func ScanPushResultsPosition(scan func(dest ...any) error, noRows func(error) bool) (PushResultsPosition, error) {
	var (
		p    PushResultsPosition
		name string
	)
	if err := scan(&name, &p.Laps, &p.Examined, &p.UpdatedAtMs); err != nil {
		if noRows(err) {
			return PushResultsPosition{}, nil
		}
		return PushResultsPosition{}, err
	}
	after, ok := DecodePushResultsPosition(name)
	if !ok {
		return PushResultsPosition{}, nil
	}
	p.Stored, p.After = true, after
	return p, nil
}

// DecodePushResultsPosition parses a stored name: the key (nil for the
// journal's start), and false when name is not a position's.
func DecodePushResultsPosition(name string) (*PushResultKey, bool) {
	if name == PushResultsPositionName {
		return nil, true
	}
	rest, ok := strings.CutPrefix(name, PushResultsPositionName+":")
	if !ok {
		return nil, false
	}
	var parts [3]string
	for i := range parts {
		n, tail, ok := strings.Cut(rest, ":")
		size, err := strconv.Atoi(n)
		if !ok || err != nil || size < 0 || size > len(tail) || strconv.Itoa(size) != n {
			return nil, false
		}
		parts[i], rest = tail[:size], tail[size:]
	}
	if rest != "" {
		return nil, false
	}
	return &PushResultKey{Partition: parts[0], ClientID: parts[1], ClientCommitID: parts[2]}, true
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
