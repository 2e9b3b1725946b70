package pgstore

import (
	"context"
	"fmt"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// AppendCommit appends c to the partition's log with the next sequence,
// which the transaction knows from the partition lock (batch.seq): the
// commit row (the fence trigger runs here), the changes, their scope index
// entries and the delete tombstones as unnest arrays, in one statement
// (sqlAppendCommit), or, past MaxChangesPerStatement elements, in
// statements of at most that many each. The statements are deferred: they
// travel with the next statement that has an answer, at the latest with
// the end of the enclosing Candidate or commit, whose error a failure of
// theirs (the writer fence) then is. The
// partition's max_commit_seq is written back once, at COMMIT; the batch's
// commit notification follows its COMMIT (sqlNotifyCommit, ListenCommits).
func (t *writeTx) AppendCommit(ctx context.Context, c store.NewCommit) (int64, error) {
	if t.st == nil {
		return 0, store.ErrNoSchema
	}
	if t.done {
		return 0, errTxDone
	}
	b := t.b
	if !b.seqKnown {
		// The lock has not been sent yet: it reads the sequence.
		if err := b.flush(ctx, t); err != nil {
			return 0, fmt.Errorf("append commit: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	seq := b.seq + 1
	chunk := t.s().cfg.MaxChangesPerStatement
	changes := buildChangeArrays(c.Changes)
	sc, ts := changes.scopeEntries, changes.tombstones
	if max(len(c.Changes), len(sc.tbl), len(ts.tbl)) <= chunk {
		_ = t.write("append commit", sqlAppendCommit, t.partition, seq, c.ClientID, c.ClientCommitID, c.ActorID, c.CreatedAtMs,
			int64(t.st.version), changes.idx, changes.tbl, changes.rowID, changes.op, changes.rowVersion, changes.scopes,
			changes.payload, sc.tbl, sc.vars, sc.values, ts.tbl, ts.rowID)
		t.b.pending[len(t.b.pending)-1].appended = &appendedCommit{seq: seq, commit: c, version: int64(t.st.version), changes: changes}
	} else {
		t.appendChunked(seq, c, changes, chunk)
	}
	for i := range ts.tbl {
		t.forgetTomb(rowKey{ts.tbl[i], ts.rowID[i]})
	}
	b.seq = seq
	t.appended++
	return seq, nil
}

// appendChunked queues the statements of an append whose changes, scope
// index entries or tombstones are more than one statement takes.
func (t *writeTx) appendChunked(seq int64, c store.NewCommit, changes *changeArrays, chunk int) {
	_ = t.write("append commit", sqlInsertCommit, t.partition, seq, c.ClientID, c.ClientCommitID, c.ActorID, c.CreatedAtMs, int64(t.st.version))
	for lo := 0; lo < len(c.Changes); lo += chunk {
		hi := min(lo+chunk, len(c.Changes))
		_ = t.write("append commit: changes", sqlInsertChanges, t.partition, seq, changes.idx[lo:hi], changes.tbl[lo:hi], changes.rowID[lo:hi],
			changes.op[lo:hi], changes.rowVersion[lo:hi], changes.scopes[lo:hi], changes.payload[lo:hi])
	}
	sc := changes.scopeEntries
	for lo := 0; lo < len(sc.tbl); lo += chunk {
		hi := min(lo+chunk, len(sc.tbl))
		_ = t.write("append commit: change scopes", sqlInsertChangeScopes, t.partition, seq, sc.tbl[lo:hi], sc.vars[lo:hi], sc.values[lo:hi])
	}
	ts := changes.tombstones
	for lo := 0; lo < len(ts.tbl); lo += chunk {
		hi := min(lo+chunk, len(ts.tbl))
		_ = t.write("append commit: tombstones", sqlUpsertTombstones, t.partition, seq, ts.tbl[lo:hi], ts.rowID[lo:hi])
	}
}

// appendedCommit is the content of an append in one statement, and the
// journal record that joined it (nil before).
type appendedCommit struct {
	seq     int64
	commit  store.NewCommit
	version int64
	changes *changeArrays
	result  *journalRecord
}

// journalRecord is a push result written with its commit's append.
type journalRecord struct {
	clientID, clientCommitID string
	body                     []byte
}

// changeArrays are the columns of a commit's changes, one array per
// column, with the deduplicated scope index entries and tombstones.
type changeArrays struct {
	idx        []int32
	tbl        []string
	rowID      []string
	op         []int16
	rowVersion []*int64
	scopes     []string
	payload    [][]byte

	scopeEntries struct{ tbl, vars, values []string }
	tombstones   struct{ tbl, rowID []string }
}

func buildChangeArrays(changes []store.Change) *changeArrays {
	n := len(changes)
	a := &changeArrays{
		idx: make([]int32, n), tbl: make([]string, n), rowID: make([]string, n), op: make([]int16, n),
		rowVersion: make([]*int64, n), scopes: make([]string, n), payload: make([][]byte, n),
	}
	type scopeKey struct{ tbl, v, value string }
	type rowKey struct{ tbl, rowID string }
	seenScope := map[scopeKey]bool{}
	seenRow := map[rowKey]bool{}
	for i, ch := range changes {
		a.idx[i], a.tbl[i], a.rowID[i], a.op[i] = int32(i), ch.Table, ch.RowID, int16(ch.Op)
		a.scopes[i] = string(store.EncodeScopes(ch.Scopes))
		if ch.Op == wire.OpUpsert {
			v := ch.RowVersion
			a.rowVersion[i] = &v
			a.payload[i] = nonNilBytes(ch.Payload)
		} else {
			a.payload[i] = ch.Payload
		}
		for _, s := range ch.Scopes {
			k := scopeKey{ch.Table, s.Key, s.Value}
			if !seenScope[k] {
				seenScope[k] = true
				a.scopeEntries.tbl = append(a.scopeEntries.tbl, ch.Table)
				a.scopeEntries.vars = append(a.scopeEntries.vars, s.Key)
				a.scopeEntries.values = append(a.scopeEntries.values, s.Value)
			}
		}
		if ch.Op == wire.OpDelete {
			k := rowKey{ch.Table, ch.RowID}
			if !seenRow[k] {
				seenRow[k] = true
				a.tombstones.tbl = append(a.tombstones.tbl, ch.Table)
				a.tombstones.rowID = append(a.tombstones.rowID, ch.RowID)
			}
		}
	}
	return a
}
