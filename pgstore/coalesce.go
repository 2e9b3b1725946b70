package pgstore

import "github.com/syncgo/syncgo/wire"

// Coalesced appends: when a batch of several commits reaches its COMMIT
// with every commit's statements still deferred (the usual push: the
// reads went ahead, the row upserts and the append wait for the end), the
// commits' appends are one statement for all of them instead of one each,
// and the per-commit savepoints give way to one around the whole tail.
// The row upserts of the tail are joined too, one statement per table
// (writeRows, see coalescedUpserts): the statement overhead of the
// appends (four inserts, their executor start, the parameter arrays) and
// of the upserts is paid once per batch.
//
// The tail is sent in the COMMIT's own round trip:
//
//	SAVEPOINT syncgo_tail; <row upserts, one per table>; <all appends>;
//	RELEASE SAVEPOINT syncgo_tail; [sequence write-back]; COMMIT; ...
//
// Moving the appends after the upserts is safe because the tail holds
// nothing else: upserts write the tables of rows and their scope entries,
// appends the log tables (commits, changes, change scopes, journal), and
// no append of the tail carries a tombstone (a delete, whose tombstone a
// later commit's write of the same row could clear). When any statement
// of the tail fails, the transaction is rolled back to syncgo_tail and
// the original statements (each commit in its savepoint) are sent as
// before, so a failing commit is told apart from the others exactly as
// without coalescing (batch.lateFailure).

const (
	sqlSavepointTailName = "syncgo_tail"
	whatUpsertRows       = "upsert rows (coalesced)"

	// sqlAppendCommits is sqlAppendCommitResult for several commits: $2-$7
	// the commits' columns, $8-$15 their changes (with each change's
	// commit sequence first), $16-$19 the scope index entries, $20-$22
	// the journal records (text, cast to JSONB).
	sqlAppendCommits = `WITH c AS (
  INSERT INTO sync_commits(partition, commit_seq, client_id, client_commit_id, actor_id, created_at_ms, writer_version)
  SELECT $1, c.seq, c.client_id, c.client_commit_id, c.actor_id, c.created_at_ms, c.writer_version
    FROM unnest($2::int8[], $3::text[], $4::text[], $5::text[], $6::int8[], $7::int8[])
         AS c(seq, client_id, client_commit_id, actor_id, created_at_ms, writer_version)
), ch AS (
  INSERT INTO sync_changes(partition, commit_seq, idx, tbl, row_id, op, row_version, scopes, payload)
  SELECT $1, c.seq, c.idx, c.tbl, c.row_id, c.op, c.row_version, c.scopes::jsonb, c.payload
    FROM unnest($8::int8[], $9::int4[], $10::text[], $11::text[], $12::int2[], $13::int8[], $14::text[], $15::bytea[])
         AS c(seq, idx, tbl, row_id, op, row_version, scopes, payload)
), cs AS (
  INSERT INTO sync_change_scopes(partition, tbl, var, value, commit_seq)
  SELECT $1, s.tbl, s.var, s.value, s.seq FROM unnest($16::int8[], $17::text[], $18::text[], $19::text[]) AS s(seq, tbl, var, value)
  ON CONFLICT DO NOTHING
), j AS (
  INSERT INTO sync_push_results(partition, client_id, client_commit_id, result)
  SELECT $1, j.client_id, j.client_commit_id, j.result::jsonb
    FROM unnest($20::text[], $21::text[], $22::text[]) AS j(client_id, client_commit_id, result)
)
SELECT 1`
)

// appendColumns gathers the arguments of the appends of a tail.
type appendColumns struct {
	seq, createdAt, writerVersion []int64
	clientID, commitID, actor     []string

	chSeq      []int64
	chIdx      []int32
	chTbl      []string
	chRow      []string
	chOp       []int16
	chVersion  []*int64
	chScopes   []string
	chPayload  [][]byte
	scSeq      []int64
	scTbl      []string
	scVar      []string
	scValue    []string
	jClient    []string
	jCommit    []string
	jRecord    []string
	totalElems int
}

// add appends one commit's append; false when it writes a tombstone.
func (a *appendColumns) add(ac *appendedCommit) bool {
	ch := ac.changes
	if len(ch.tombstones.tbl) > 0 {
		return false
	}
	c, seq := ac.commit, ac.seq
	a.seq, a.clientID, a.commitID = append(a.seq, seq), append(a.clientID, c.ClientID), append(a.commitID, c.ClientCommitID)
	a.actor, a.createdAt, a.writerVersion = append(a.actor, c.ActorID), append(a.createdAt, c.CreatedAtMs), append(a.writerVersion, ac.version)
	for range ch.idx {
		a.chSeq = append(a.chSeq, seq)
	}
	a.chIdx, a.chTbl, a.chRow, a.chOp = append(a.chIdx, ch.idx...), append(a.chTbl, ch.tbl...), append(a.chRow, ch.rowID...), append(a.chOp, ch.op...)
	a.chVersion, a.chScopes, a.chPayload = append(a.chVersion, ch.rowVersion...), append(a.chScopes, ch.scopes...), append(a.chPayload, ch.payload...)
	sc := ch.scopeEntries
	for range sc.tbl {
		a.scSeq = append(a.scSeq, seq)
	}
	a.scTbl, a.scVar, a.scValue = append(a.scTbl, sc.tbl...), append(a.scVar, sc.vars...), append(a.scValue, sc.values...)
	if r := ac.result; r != nil {
		a.jClient, a.jCommit, a.jRecord = append(a.jClient, r.clientID), append(a.jCommit, r.clientCommitID), append(a.jRecord, string(r.body))
	}
	a.totalElems += max(len(ch.idx), len(sc.tbl))
	return true
}

// coalescedTail returns the statements that replace b.pending at the
// COMMIT (see above), or nil when the pending statements are not a tail
// of at least two commits of the form it takes.
func (b *batch) coalescedTail() []deferred {
	if !b.multi || len(b.pending) == 0 {
		return nil
	}
	var (
		cols    appendColumns
		upserts []deferred
		appends int
	)
	for _, d := range b.pending {
		switch {
		case d.scan != nil || d.rows != nil:
			return nil
		case d.ctl && d.owner != nil && (d.sql == sqlSavepointCommit || d.sql == sqlReleaseCommit):
		case !d.ctl && d.owner != nil && d.what == "upsert row":
			upserts = append(upserts, d)
		case !d.ctl && d.owner != nil && d.appended != nil:
			if !cols.add(d.appended) {
				return nil
			}
			appends++
		default:
			return nil
		}
	}
	if appends < 2 || cols.totalElems > b.s.cfg.MaxChangesPerStatement {
		return nil
	}
	if cols.jClient == nil {
		cols.jClient, cols.jCommit, cols.jRecord = []string{}, []string{}, []string{}
	}
	out := make([]deferred, 0, len(upserts)+3)
	out = append(out, deferred{what: "savepoint (coalesced appends)", sql: "SAVEPOINT " + sqlSavepointTailName})
	out = append(out, b.coalescedUpserts(upserts)...)
	out = append(out, deferred{what: "append commits (coalesced)", sql: sqlAppendCommits, args: []any{b.partition,
		cols.seq, cols.clientID, cols.commitID, cols.actor, cols.createdAt, cols.writerVersion,
		cols.chSeq, cols.chIdx, cols.chTbl, cols.chRow, cols.chOp, cols.chVersion, cols.chScopes, cols.chPayload,
		cols.scSeq, cols.scTbl, cols.scVar, cols.scValue,
		cols.jClient, cols.jCommit, cols.jRecord}})
	out = append(out, deferred{what: "release savepoint (coalesced appends)", sql: "RELEASE SAVEPOINT " + sqlSavepointTailName})
	for i := range out {
		// Owned by no commit: a failure of one is the tail's, which
		// batch.commit undoes before sending the originals.
		out[i].owner = nil
	}
	return out
}

// coalescedUpserts returns the row upserts of a tail with those of each
// table that allows it (rowsBatch) joined into one writeRows statement.
// Only the upserts of the tail write the rows tables and their scope index
// entries, the tables apart from each other: so the statements of two
// tables may run in any order, and of several upserts of one row only the
// last need be written (the row and its entries end as it leaves them).
func (b *batch) coalescedUpserts(upserts []deferred) []deferred {
	var (
		order  []*tableSQL
		byTbl  = map[*tableSQL][]int{}
		others []deferred
	)
	for i, d := range upserts {
		if d.row == nil || !d.row.rowsBatch {
			others = append(others, d)
			continue
		}
		if byTbl[d.row] == nil {
			order = append(order, d.row)
		}
		byTbl[d.row] = append(byTbl[d.row], i)
	}
	out := others
	for _, ts := range order {
		idx := byTbl[ts]
		if d, ok := b.writeRows(ts, upserts, idx); ok {
			out = append(out, d)
			continue
		}
		for _, i := range idx {
			out = append(out, upserts[i])
		}
	}
	return out
}

// writeRows joins the upserts upserts[idx] (of table ts, writeRow's
// arguments) into one writeRows statement; false when they are one or too
// many for one statement.
func (b *batch) writeRows(ts *tableSQL, upserts []deferred, idx []int) (deferred, bool) {
	if len(idx) < 2 {
		return deferred{}, false
	}
	// The last upsert of each row, in the order of the rows' first.
	last := make(map[string]int, len(idx))
	var rows []string
	for _, i := range idx {
		id := upserts[i].args[1].(string)
		if _, seen := last[id]; !seen {
			rows = append(rows, id)
		}
		last[id] = i
	}
	nt := len(ts.typed)
	typed := make([][]any, nt)
	var (
		sv              = make([]int64, 0, len(rows))
		scopes          = make([]string, 0, len(rows))
		payload, colVer = make([][]byte, 0, len(rows)), make([][]byte, 0, len(rows))
		eRow, eVar, eVa []string
	)
	for _, id := range rows {
		a := upserts[last[id]].args
		for c := range nt {
			typed[c] = append(typed[c], a[2+c])
		}
		m := a[2+nt:]
		cv, _ := m[3].([]byte)
		sv, scopes, payload, colVer = append(sv, m[0].(int64)), append(scopes, m[1].(string)), append(payload, m[2].([]byte)), append(colVer, cv)
		vars, values := m[5].([]string), m[6].([]string)
		for range vars {
			eRow = append(eRow, id)
		}
		eVar, eVa = append(eVar, vars...), append(eVa, values...)
	}
	if len(rows) > b.s.cfg.MaxChangesPerStatement || len(eRow) > b.s.cfg.MaxChangesPerStatement {
		return deferred{}, false
	}
	if eRow == nil {
		eRow, eVar, eVa = []string{}, []string{}, []string{}
	}
	args := make([]any, 0, 3+nt+4+3)
	args = append(args, b.partition, ts.name, rows)
	for c, col := range ts.typed {
		args = append(args, typedArray(col.Type, typed[c]))
	}
	args = append(args, sv, scopes, payload, colVer, eRow, eVar, eVa)
	return deferred{what: whatUpsertRows, sql: ts.writeRows, args: args}, true
}

// typedArray is the array argument of a typed column of type t in
// writeRows, from projectValue's values (nil for NULL).
func typedArray(t wire.ColumnType, vals []any) any {
	switch t {
	case wire.TypeInteger:
		return pointers[int64](vals)
	case wire.TypeFloat:
		return pointers[float64](vals)
	case wire.TypeBoolean:
		return pointers[bool](vals)
	case wire.TypeBytes, wire.TypeCRDT:
		out := make([][]byte, len(vals))
		for i, v := range vals {
			out[i], _ = v.([]byte)
		}
		return out
	default: // text, JSON (cast by the statement)
		return pointers[string](vals)
	}
}

// pointers returns vals as pointers to T, nil for NULL.
func pointers[T any](vals []any) []*T {
	out := make([]*T, len(vals))
	for i, v := range vals {
		if x, ok := v.(T); ok {
			out[i] = &x
		}
	}
	return out
}
