package sqlitestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"zombiezen.com/go/sqlite"

	"github.com/syncgo/syncgo/internal/rowbuf"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

const selectPushResult = "SELECT result FROM sync_push_results WHERE partition=? AND client_id=? AND client_commit_id=?"

func scanRow(row *row, table string) (store.Row, error) {
	r := store.Row{Table: table}
	var scopes []byte
	err := row.Scan(&r.RowID, &r.ServerVersion, &scopes, &r.Payload, &r.ColumnVersions)
	if errors.Is(err, errNoRows) {
		return store.Row{}, store.ErrNotFound
	}
	if err != nil {
		return store.Row{}, fmt.Errorf("read row: %w", err)
	}
	if r.Scopes, err = store.DecodeScopes(scopes); err != nil {
		return store.Row{}, err
	}
	return r, nil
}

func scanPushResult(row *row) (store.PushRecord, error) {
	var js []byte
	err := row.Scan(&js)
	if errors.Is(err, errNoRows) {
		return store.PushRecord{}, store.ErrNotFound
	}
	if err != nil {
		return store.PushRecord{}, fmt.Errorf("read push result: %w", err)
	}
	return store.DecodePushRecord(js)
}

// Row returns a current row.
func (s *Store) Row(ctx context.Context, partition, table, rowID string) (store.Row, error) {
	if s.closed.Load() {
		return store.Row{}, store.ErrClosed
	}
	t, err := s.table(table)
	if err != nil {
		return store.Row{}, err
	}
	var r store.Row
	err = s.read(ctx, func(c *conn) error {
		var err error
		r, err = scanRow(c.queryRow(t.selectBy, partition, rowID), table)
		return err
	})
	return r, err
}

// PushResult reads the push-result journal.
func (s *Store) PushResult(ctx context.Context, partition, clientID, clientCommitID string) (store.PushRecord, error) {
	if s.closed.Load() {
		return store.PushRecord{}, store.ErrClosed
	}
	var rec store.PushRecord
	err := s.read(ctx, func(c *conn) error {
		var err error
		rec, err = scanPushResult(c.queryRow(selectPushResult, partition, clientID, clientCommitID))
		return err
	})
	return rec, err
}

// jsonList encodes values as a JSON array for json_each.
func jsonList(values []string) string {
	b, _ := json.Marshal(values)
	return string(b)
}

// windowChunk is how many candidate commits one window query reads.
const windowChunk = 512

// ReadCommitWindow reads the commits of (AfterSeq, ThroughSeq] that change
// rows of the table inside the effective scopes. Candidates come from the
// change-scope index on the first effective key; every change is then
// checked against all keys.
func (s *Store) ReadCommitWindow(ctx context.Context, partition string, q store.CommitWindowQuery) (store.CommitWindow, error) {
	if s.closed.Load() {
		return store.CommitWindow{}, store.ErrClosed
	}
	if len(q.Scopes) == 0 {
		return store.CommitWindow{}, store.ErrScanRequiresScope
	}
	if _, err := s.table(q.Table); err != nil {
		return store.CommitWindow{}, err
	}
	if !q.Bulk && q.ThroughSeq > q.AfterSeq && q.ThroughSeq-q.AfterSeq <= shortWindowCommits {
		if win, ok, err := s.recentWindow(ctx, partition, q); ok {
			return win, err
		}
		return s.readSharedWindow(ctx, partition, q)
	}
	return s.readCommitWindow(ctx, partition, q)
}

// readCommitWindow is ReadCommitWindow read on its own.
func (s *Store) readCommitWindow(ctx context.Context, partition string, q store.CommitWindowQuery) (store.CommitWindow, error) {
	w, release := s.newWindowReader(q)
	defer release()
	after, first := q.AfterSeq, true
	for {
		var (
			last int64
			more bool
		)
		// A one-value window's first chunk is one statement in an
		// implicit transaction (a push+pull round's window ends there);
		// the next ones, and a bulk window's first, are range reads,
		// whose statements run in one snapshot.
		rng := w.single && (!first || q.Bulk)
		read := s.read
		switch {
		case q.Bulk:
			// A bulk window (a catch-up's read-ahead) reads a thousand
			// commits' pages once: on a scan connection, whose small
			// page cache reads them into the same slots.
			read = func(ctx context.Context, fn func(c *conn) error) error {
				return s.readTxOn(ctx, s.scanners, fn)
			}
		case rng || q.StateAfter:
			read = s.readTx
		}
		err := read(ctx, func(c *conn) error {
			var err error
			_, last, more, err = w.step(c, partition, after, rng)
			if err != nil || !q.StateAfter || (more && !w.full) {
				return err
			}
			// The window's last chunk: the partition and the serve gate
			// after its rows, in its read transaction.
			st, err := partitionStateOn(c, partition, q.Running)
			if err != nil {
				return err
			}
			w.out.State = &st
			return nil
		})
		first = false
		if err != nil {
			return store.CommitWindow{}, err
		}
		if w.full {
			return w.out, nil
		}
		if !more {
			w.out.Complete = true
			return w.out, nil
		}
		after = last
	}
}

// newWindowReader starts the window of q; release returns its scratch.
func (s *Store) newWindowReader(q store.CommitWindowQuery) (w *windowReader, release func()) {
	w = &windowReader{q: q}
	sc, _ := s.windowScratch.Get().(*windowScratch)
	if sc == nil {
		sc = &windowScratch{}
	}
	w.rng.cands, w.rng.heads = sc.cands[:0], sc.heads[:0]
	if values := dedupe(q.Scopes[0].Values); len(values) == 1 {
		w.one, w.single = values[0], true
	} else {
		w.values = jsonList(values)
	}
	if q.LimitChanges > 0 {
		// Small at first: a push+pull round's window holds a commit or
		// two, and a full-size slice was zeroed for each. A range read
		// grows it to its candidates.
		w.out.Commits = make([]store.Commit, 0, min(q.LimitChanges, 16))
	}
	return w, func() {
		// Neither escapes into the window: the commits are copies of the
		// heads, and the candidates are only compared with.
		sc.cands, sc.heads = w.rng.cands[:0], w.rng.heads[:0]
		s.windowScratch.Put(sc)
	}
}

// step reads the window's next chunk after the sequence after on c: a
// range read (rng, one value), the first chunk of one value, or a chunk
// of several values' candidates. more reports that the chunk was full.
func (w *windowReader) step(c *conn, partition string, after int64, rng bool) (n int, last int64, more bool, err error) {
	switch {
	case rng:
		return readWindowRange(c, partition, w, after)
	case w.single:
		n, last, err = readWindowChunkOf(c, windowOneFirstSQL, partition, w, after)
		return n, last, n == windowFirstChunk, err
	default:
		n, last, err = readWindowChunk(c, partition, w, after)
		return n, last, n == windowChunk, err
	}
}

// ReadCommitWindows implements store.CommitWindowBatcher: the windows of
// qs are read in one read transaction on one connection (each window
// chunk by chunk, as ReadCommitWindow reads it, the chunks after a
// one-value window's first by range), and the partition and serve gate
// once after all of them, every window's State when its query asked for
// it. A pull's sections then pay one transaction, not one each.
func (s *Store) ReadCommitWindows(ctx context.Context, partition string, qs []store.CommitWindowQuery) ([]store.CommitWindow, error) {
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	var running *int32
	for _, q := range qs {
		if len(q.Scopes) == 0 {
			return nil, store.ErrScanRequiresScope
		}
		if _, err := s.table(q.Table); err != nil {
			return nil, err
		}
		if q.StateAfter {
			if running != nil && *running != q.Running {
				return nil, errors.New("sqlitestore: ReadCommitWindows: queries of different running versions")
			}
			running = &q.Running
		}
	}
	if out, ok, err := s.recentWindows(ctx, partition, qs, running); ok {
		return out, err
	}
	out := make([]store.CommitWindow, len(qs))
	err := s.readTx(ctx, func(c *conn) error {
		for i, q := range qs {
			if q.ThroughSeq <= q.AfterSeq {
				out[i] = store.CommitWindow{Complete: true}
				continue
			}
			w, release := s.newWindowReader(q)
			err := w.readAll(c, partition)
			release()
			if err != nil {
				return err
			}
			out[i] = w.out
		}
		if running == nil {
			return nil
		}
		st, err := partitionStateOn(c, partition, *running)
		if err != nil {
			return err
		}
		for i, q := range qs {
			if q.StateAfter {
				c := st // each window its own copy
				out[i].State = &c
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// readAll reads the whole window on c, chunk by chunk.
func (w *windowReader) readAll(c *conn, partition string) error {
	after, first := w.q.AfterSeq, true
	for {
		_, last, more, err := w.step(c, partition, after, w.single && !first)
		if err != nil {
			return err
		}
		first = false
		if w.full {
			return nil
		}
		if !more {
			w.out.Complete = true
			return nil
		}
		after = last
	}
}

// windowReader accumulates a commit window across chunks.
type windowReader struct {
	q store.CommitWindowQuery
	// one is the first key's value when it has one (single: the range
	// read, or windowOneSQL); values is the JSON list of its values
	// otherwise (windowSQL).
	one, values string
	single      bool
	out         store.CommitWindow
	changes     int
	full        bool // the change limit stopped the window
	scan        windowScan
	rng         rangeScan
}

// add offers one candidate commit with its matching changes; it reports
// false when the limit leaves no room for it.
func (w *windowReader) add(c store.Commit) bool {
	if len(c.Changes) == 0 {
		return true
	}
	if w.q.LimitChanges > 0 && len(w.out.Commits) > 0 && w.changes+len(c.Changes) > w.q.LimitChanges {
		w.full = true
		return false
	}
	w.out.Commits = append(w.out.Commits, c)
	w.changes += len(c.Changes)
	return true
}

// windowSQL has its chunk size (windowChunk, 512) inline: a bound LIMIT
// would make SQLite re-prepare the statement at every execution. The
// candidates are bounded first: for each scope value, the 512th candidate
// after the cursor (one index walk of at most 512 entries); the smallest
// of those bounds the range, since the 512 first candidates of the window
// all lie at or below it. Without the bound, SQLite collected and sorted
// every candidate from the cursor to the head for each chunk (catch-up cost
// growing with the log). The CROSS JOINs pin the join order: the
// candidates drive, each looked up by primary key; left to itself the
// planner drove the join from sync_changes by partition alone, a scan of
// the whole log per chunk.
const windowSQL = `WITH bound AS (
  SELECT min(coalesce((SELECT s.commit_seq FROM sync_change_scopes s
     WHERE s.partition=?1 AND s.tbl=?2 AND s.var=?3 AND s.value=v.value
       AND s.commit_seq > ?5 AND s.commit_seq <= ?6
     ORDER BY s.commit_seq LIMIT 1 OFFSET 511), ?6)) AS hi
    FROM json_each(?4) v),
cand AS (
  SELECT DISTINCT commit_seq FROM sync_change_scopes
   WHERE partition=?1 AND tbl=?2 AND var=?3
     AND value IN (SELECT value FROM json_each(?4))
     AND commit_seq > ?5 AND commit_seq <= (SELECT hi FROM bound)
   ORDER BY commit_seq LIMIT 512)
SELECT cand.commit_seq, c.created_at_ms, c.actor_id, c.client_id, c.client_commit_id,
       ch.row_id, ch.op, ch.row_version, ch.scopes, ch.payload
  FROM cand
  CROSS JOIN sync_commits c ON c.partition=?1 AND c.commit_seq=cand.commit_seq
  CROSS JOIN sync_changes ch ON ch.partition=?1 AND ch.commit_seq=cand.commit_seq AND ch.tbl=?2
 ORDER BY cand.commit_seq, ch.idx`

// windowOneSQL is windowSQL for a first key of one value (a catch-up of
// one scope, the common case): the change-scope index walk itself drives
// the join, in commit order, up to the 512th candidate (one walk of at
// most 512 entries bounds it), so there is no candidate set to collect
// and deduplicate, and the rows come out in the ORDER BY's order without
// a sort (windowSQL sorts every row of the chunk, payloads included, in a
// temporary b-tree). The unary + on the join columns keeps the planner
// from deriving a commit_seq range on sync_changes from the walk's range
// (it then searched sync_changes by range for every candidate) and pins
// the equality probes.
const windowOneSQL = windowOneHead + "511" + windowOneTail

// windowOneFirstSQL is windowOneSQL with a chunk of windowFirstChunk
// candidates: the first chunk of a one-value window. A push+pull round's
// window (a commit or two) is this one statement; a longer window goes on
// by range reads (readWindowRange).
const windowOneFirstSQL = windowOneHead + "31" + windowOneTail

// windowFirstChunk is windowOneFirstSQL's chunk (its OFFSET plus one).
const windowFirstChunk = 32

const windowOneHead = `SELECT s.commit_seq, c.created_at_ms, c.actor_id, c.client_id, c.client_commit_id,
       ch.row_id, ch.op, ch.row_version, ch.scopes, ch.payload
  FROM sync_change_scopes s
  CROSS JOIN sync_commits c ON c.partition=?1 AND c.commit_seq=+s.commit_seq
  CROSS JOIN sync_changes ch ON ch.partition=?1 AND ch.commit_seq=+s.commit_seq AND ch.tbl=?2
 WHERE s.partition=?1 AND s.tbl=?2 AND s.var=?3 AND s.value=?4 AND s.commit_seq > ?5
   AND s.commit_seq <= coalesce((SELECT x.commit_seq FROM sync_change_scopes x
     WHERE x.partition=?1 AND x.tbl=?2 AND x.var=?3 AND x.value=?4
       AND x.commit_seq > ?5 AND x.commit_seq <= ?6
     ORDER BY x.commit_seq LIMIT 1 OFFSET `

const windowOneTail = `), ?6)
 ORDER BY s.commit_seq, ch.idx`

// windowScan is what a window read reuses from row to row: a buffer for
// the text columns, the last change's stored scopes with their decoding
// (the changes of one scope mostly store the same scopes, so they share
// one decoded, read-only StoredScopes) and the last commit's actor and
// client (one string for a run of commits of one client).
type windowScan struct {
	buf           []byte
	scopesRaw     []byte
	scopes        wire.StoredScopes
	actor, client string
	// strs holds the bytes of the row ids and client commit ids read
	// (arenaText): one allocation per block instead of one per string.
	strs rowbuf.Arena
}

// arenaText reads column i as a string whose bytes live in the scan's
// string arena.
func (ws *windowScan) arenaText(st *sqlite.Stmt, i int) string {
	n := st.ColumnLen(i)
	if n == 0 {
		return ""
	}
	b := ws.strs.Alloc(n)
	st.ColumnBytes(i, b)
	return unsafe.String(&b[0], n)
}

// column copies column i's bytes into the scan buffer; the slice is valid
// until the next call.
func (ws *windowScan) column(st *sqlite.Stmt, i int) []byte {
	n := st.ColumnLen(i)
	if cap(ws.buf) < n {
		ws.buf = make([]byte, n, max(n, 2*cap(ws.buf)))
	}
	b := ws.buf[:n]
	st.ColumnBytes(i, b)
	return b
}

// text reads column i as a string, prev when it is equal.
func (ws *windowScan) text(st *sqlite.Stmt, i int, prev string) string {
	if b := ws.column(st, i); string(b) != prev {
		return string(b)
	}
	return prev
}

// decodeScopes decodes column i's stored scopes, or returns the last
// decoding when the bytes are the same.
func (ws *windowScan) decodeScopes(st *sqlite.Stmt, i int) (wire.StoredScopes, error) {
	b := ws.column(st, i)
	if ws.scopes != nil && string(b) == string(ws.scopesRaw) {
		return ws.scopes, nil
	}
	sc, err := store.DecodeScopes(b)
	if err != nil {
		return nil, err
	}
	ws.scopesRaw, ws.scopes = append(ws.scopesRaw[:0], b...), sc
	return sc, nil
}

// readWindowChunk reads up to windowChunk candidate commits after `after`. It
// returns how many candidates it read and the last one. The columns are
// read from the statement directly (no Scan through interfaces: this is
// the catch-up's inner loop).
func readWindowChunk(c *conn, partition string, w *windowReader, after int64) (int, int64, error) {
	return readWindowChunkOf(c, windowOneSQL, partition, w, after)
}

// readWindowChunkOf is readWindowChunk with the one-value statement one
// (windowOneSQL or windowOneFirstSQL).
func readWindowChunkOf(c *conn, one, partition string, w *windowReader, after int64) (int, int64, error) {
	var (
		r   *rows
		err error
	)
	if w.values == "" {
		r, err = c.query(one, partition, w.q.Table, w.q.Scopes[0].Key, w.one, after, w.q.ThroughSeq)
	} else {
		r, err = c.query(windowSQL, partition, w.q.Table, w.q.Scopes[0].Key, w.values, after, w.q.ThroughSeq)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("read commit window: %w", err)
	}
	defer r.Close()
	if n := r.st.ColumnCount(); n != 10 {
		return 0, 0, fmt.Errorf("read commit window: %d columns", n)
	}
	var (
		n   int
		cur store.Commit
		ws  = &w.scan
		st  = r.st
	)
	cur.Seq = -1
	for r.Next() {
		seq := st.ColumnInt64(0)
		if seq != cur.Seq {
			if cur.Seq >= 0 && !w.add(cur) {
				return n, cur.Seq, nil
			}
			n++
			ws.actor, ws.client = ws.text(st, 2, ws.actor), ws.text(st, 3, ws.client)
			cur = store.Commit{Seq: seq, CreatedAtMs: st.ColumnInt64(1), ActorID: ws.actor, ClientID: ws.client,
				ClientCommitID: ws.arenaText(st, 4)}
		}
		ch := store.Change{Table: w.q.Table, RowID: ws.arenaText(st, 5), Op: wire.Op(st.ColumnInt64(6)),
			RowVersion: st.ColumnInt64(7), Payload: columnBytes(st, 9)}
		if ch.Scopes, err = ws.decodeScopes(st, 8); err != nil {
			return 0, 0, err
		}
		if store.MatchScopes(ch.Scopes, w.q.Scopes) {
			cur.Changes = append(cur.Changes, ch)
		}
	}
	if err := r.Err(); err != nil {
		return 0, 0, fmt.Errorf("read commit window: %w", err)
	}
	if cur.Seq >= 0 {
		w.add(cur)
	}
	return n, cur.Seq, nil
}

// ListRows reads a page of a table's rows regardless of scopes.
func (s *Store) ListRows(ctx context.Context, partition, table string, after *string, limit int) ([]store.Row, error) {
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	t, err := s.table(table)
	if err != nil {
		return nil, err
	}
	start := ""
	if after != nil {
		start = *after
	}
	var out []store.Row
	err = s.read(ctx, func(c *conn) error {
		rows, err := c.query("SELECT "+t.scanCols+" FROM "+t.name+
			" WHERE _sync_partition=? AND _sync_row_id > ? ORDER BY _sync_row_id LIMIT ?", partition, start, limit)
		if err != nil {
			return fmt.Errorf("list rows: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			r := store.Row{Table: table}
			var scopes []byte
			if err := rows.Scan(&r.RowID, &r.ServerVersion, &scopes, &r.Payload, &r.ColumnVersions); err != nil {
				return fmt.Errorf("list rows: %w", err)
			}
			if r.Scopes, err = store.DecodeScopes(scopes); err != nil {
				return err
			}
			out = append(out, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// LatestScopedChangeSeq returns the scope pin input of §4.7.
func (s *Store) LatestScopedChangeSeq(ctx context.Context, partition, table string, scope wire.ScopeValues) (int64, error) {
	if s.closed.Load() {
		return 0, store.ErrClosed
	}
	var seq nullInt64
	err := s.read(ctx, func(c *conn) error {
		return c.queryRow(`SELECT MAX(commit_seq) FROM sync_change_scopes
WHERE partition=? AND tbl=? AND var=? AND value IN (SELECT value FROM json_each(?))`,
			partition, table, scope.Key, jsonList(scope.Values)).Scan(&seq)
	})
	if err != nil {
		return 0, fmt.Errorf("latest scoped change: %w", err)
	}
	return seq.Int64, nil
}

// ReadCommits reads whole commits of a window, oldest first.
func (s *Store) ReadCommits(ctx context.Context, partition string, afterSeq, throughSeq int64, limit int) ([]store.Commit, error) {
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	var out []store.Commit
	err := s.read(ctx, func(cn *conn) error {
		var err error
		out, err = readCommits(cn, partition, afterSeq, throughSeq, limit)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func readCommits(cn *conn, partition string, afterSeq, throughSeq int64, limit int) ([]store.Commit, error) {
	rows, err := cn.query(`WITH c AS (
  SELECT commit_seq, created_at_ms, actor_id, client_id, client_commit_id FROM sync_commits
   WHERE partition=?1 AND commit_seq > ?2 AND commit_seq <= ?3 ORDER BY commit_seq LIMIT ?4)
SELECT c.commit_seq, c.created_at_ms, c.actor_id, c.client_id, c.client_commit_id,
       ch.tbl, ch.row_id, ch.op, ch.row_version, ch.scopes, ch.payload
  FROM c LEFT JOIN sync_changes ch ON ch.partition=?1 AND ch.commit_seq=c.commit_seq
 ORDER BY c.commit_seq, ch.idx`, partition, afterSeq, throughSeq, limit)
	if err != nil {
		return nil, fmt.Errorf("read commits: %w", err)
	}
	defer rows.Close()
	var out []store.Commit
	for rows.Next() {
		var (
			c       store.Commit
			tbl     nullString
			rowID   nullString
			op      nullInt64
			version nullInt64
			scopes  []byte
			payload []byte
		)
		if err := rows.Scan(&c.Seq, &c.CreatedAtMs, &c.ActorID, &c.ClientID, &c.ClientCommitID,
			&tbl, &rowID, &op, &version, &scopes, &payload); err != nil {
			return nil, fmt.Errorf("read commits: %w", err)
		}
		if n := len(out); n == 0 || out[n-1].Seq != c.Seq {
			out = append(out, c)
		}
		if !tbl.Valid {
			continue
		}
		ch := store.Change{Table: tbl.String, RowID: rowID.String, Op: wire.Op(op.Int64), RowVersion: version.Int64, Payload: payload}
		if ch.Scopes, err = store.DecodeScopes(scopes); err != nil {
			return nil, err
		}
		last := &out[len(out)-1]
		last.Changes = append(last.Changes, ch)
	}
	return out, rows.Err()
}

// rangeChunk is how many candidates a range read takes at most; it is
// inline in windowCandSQL (a bound LIMIT would re-prepare the statement).
const rangeChunk = 1024

// rangeDensity: the candidates are read by range when their stretch of
// the log is at most this many times their number.
const rangeDensity = 4

// windowCandSQL reads the candidates of a one-value window: an index-only
// walk of the change-scope index in commit order.
const windowCandSQL = `SELECT commit_seq FROM sync_change_scopes
 WHERE partition=?1 AND tbl=?2 AND var=?3 AND value=?4 AND commit_seq > ?5 AND commit_seq <= ?6
 ORDER BY commit_seq LIMIT 1024`

// rangeCommitsSQL and rangeChangesSQL read a stretch of the log by one
// walk of each table's primary-key index (and of the rows it points to,
// which are in the same order): no index descent per commit.
const rangeCommitsSQL = `SELECT commit_seq, created_at_ms, actor_id, client_id, client_commit_id FROM sync_commits
 WHERE partition=?1 AND commit_seq >= ?2 AND commit_seq <= ?3 ORDER BY commit_seq`

// rangeCommitsWireSQL is rangeCommitsSQL for a WireOnly window: the
// client ids are not read.
const rangeCommitsWireSQL = `SELECT commit_seq, created_at_ms, actor_id FROM sync_commits
 WHERE partition=?1 AND commit_seq >= ?2 AND commit_seq <= ?3 ORDER BY commit_seq`

const rangeChangesSQL = `SELECT commit_seq, row_id, op, row_version, scopes, payload FROM sync_changes
 WHERE partition=?1 AND commit_seq >= ?2 AND commit_seq <= ?3 AND tbl=?4 ORDER BY commit_seq, idx`

// windowScratch is what a window read takes from Store.windowScratch and
// gives back: its range reads' candidate and commit-row buffers, which a
// catch-up fills to rangeChunk per window. Without it every window grew
// both from nothing, about 100 KB of allocations each.
type windowScratch struct {
	cands []int64
	heads []store.Commit
}

// rangeScan is what the range reads of a window reuse: the candidates,
// their commits (Seq 0: none, pruned while the window was read), the
// changes' backing array and a payload arena. The commits returned share
// the backing array and the arena, so neither is ever cut back while a
// window is read: earlier commits point into them.
type rangeScan struct {
	cands []int64
	heads []store.Commit
	chs   []store.Change
	arena rowbuf.Arena
}

// payload copies column i's bytes into the arena (nil for NULL).
func (rs *rangeScan) payload(st *sqlite.Stmt, i int) []byte {
	if st.ColumnType(i) == sqlite.TypeNull {
		return nil
	}
	b := rs.arena.Alloc(st.ColumnLen(i))
	st.ColumnBytes(i, b)
	return b
}

// readWindowRange reads the next chunk of a one-value window: its
// candidates first (windowCandSQL, at most as many as can still fit the
// change limit, plus one). When they are dense in their stretch of the
// log (a catch-up of a scope most commits touch), their commits and
// changes are read by one walk of each table over the stretch, merged here
// (rangeCommitsSQL, rangeChangesSQL); else by windowOneSQL's probes per
// candidate, which stay proportional to the candidates however sparse.
// It reports the candidates read, the last one, and whether more may
// follow it.
func readWindowRange(c *conn, partition string, w *windowReader, after int64) (int, int64, bool, error) {
	rs := &w.rng
	r, err := c.query(windowCandSQL, partition, w.q.Table, w.q.Scopes[0].Key, w.one, after, w.q.ThroughSeq)
	if err != nil {
		return 0, 0, false, fmt.Errorf("read commit window: %w", err)
	}
	rs.cands = slices.Grow(rs.cands[:0], rangeChunk)
	for r.Next() {
		rs.cands = append(rs.cands, r.st.ColumnInt64(0))
	}
	if err := r.Err(); err != nil {
		return 0, 0, false, fmt.Errorf("read commit window: %w", err)
	}
	cands := rs.cands
	if len(cands) == 0 {
		return 0, 0, false, nil
	}
	more := len(cands) == rangeChunk
	if w.q.LimitChanges > 0 {
		// Every candidate has a change of the table: the candidates past
		// the first limit+1 cannot fit, unless other keys filter changes
		// out; then the next chunk reads them.
		if need := max(w.q.LimitChanges-w.changes+1, 1); need < len(cands) {
			cands, more = cands[:need], true
		}
	}
	lo, hi := cands[0], cands[len(cands)-1]
	if hi-lo+1 > rangeDensity*int64(len(cands)) {
		n, last, err := readWindowChunk(c, partition, w, after)
		return n, last, n == windowChunk, err
	}
	// Room for every candidate's commit and one change each, so that a
	// catch-up's window grows its slices once, and a round's stays small.
	w.out.Commits = slices.Grow(w.out.Commits, len(cands))
	if cap(rs.chs)-len(rs.chs) < len(cands) {
		// A new backing array: the commits added point into the old one.
		rs.chs = make([]store.Change, 0, len(cands))
	}
	if err := rs.readHeads(c, partition, cands, &w.scan, w.q.WireOnly); err != nil {
		return 0, 0, false, err
	}
	if err := w.readRangeChanges(c, partition, cands); err != nil {
		return 0, 0, false, err
	}
	return len(cands), hi, more, nil
}

// readHeads reads the commit rows of cands' stretch of the log into
// rs.heads, one per candidate (without their client ids when wireOnly).
func (rs *rangeScan) readHeads(c *conn, partition string, cands []int64, ws *windowScan, wireOnly bool) error {
	query := rangeCommitsSQL
	if wireOnly {
		query = rangeCommitsWireSQL
	}
	r, err := c.query(query, partition, cands[0], cands[len(cands)-1])
	if err != nil {
		return fmt.Errorf("read commit window: %w", err)
	}
	defer r.Close()
	rs.heads = slices.Grow(rs.heads[:0], len(cands))[:len(cands)]
	clear(rs.heads)
	next, st := 0, r.st
	for r.Next() {
		seq := st.ColumnInt64(0)
		for next < len(cands) && cands[next] < seq {
			next++
		}
		if next == len(cands) {
			break
		}
		if cands[next] != seq {
			continue // not a candidate
		}
		ws.actor = ws.text(st, 2, ws.actor)
		rs.heads[next] = store.Commit{Seq: seq, CreatedAtMs: st.ColumnInt64(1), ActorID: ws.actor}
		if !wireOnly {
			ws.client = ws.text(st, 3, ws.client)
			rs.heads[next].ClientID, rs.heads[next].ClientCommitID = ws.client, ws.arenaText(st, 4)
		}
	}
	if err := r.Err(); err != nil {
		return fmt.Errorf("read commit window: %w", err)
	}
	return nil
}

// readRangeChanges reads the changes of the table in cands' stretch of
// the log, keeps the candidates' changes inside the scopes, and adds the
// commits in order until one does not fit.
func (w *windowReader) readRangeChanges(c *conn, partition string, cands []int64) error {
	rs := &w.rng
	r, err := c.query(rangeChangesSQL, partition, cands[0], cands[len(cands)-1], w.q.Table)
	if err != nil {
		return fmt.Errorf("read commit window: %w", err)
	}
	defer r.Close()
	var (
		st   = r.st
		ws   = &w.scan
		next = -1 // the candidate whose changes are being read
		from = len(rs.chs)
	)
	// add offers the current candidate's commit with the changes read
	// since from; it reports false when the commit did not fit.
	add := func() bool {
		if next < 0 || rs.heads[next].Seq == 0 {
			return true // none yet, or pruned
		}
		cm := rs.heads[next]
		cm.Changes = rs.chs[from:len(rs.chs):len(rs.chs)]
		if !w.add(cm) {
			return false
		}
		from = len(rs.chs)
		return true
	}
	i := 0
	for r.Next() {
		seq := st.ColumnInt64(0)
		for i < len(cands) && cands[i] < seq {
			i++
		}
		if i == len(cands) {
			break
		}
		if cands[i] != seq {
			continue // not a candidate
		}
		if i != next {
			if !add() {
				return nil
			}
			next = i
		}
		if rs.heads[i].Seq == 0 {
			continue // pruned
		}
		ch := store.Change{Table: w.q.Table, Op: wire.Op(st.ColumnInt64(2)), RowVersion: st.ColumnInt64(3)}
		if ch.Scopes, err = ws.decodeScopes(st, 4); err != nil {
			return err
		}
		if !store.MatchScopes(ch.Scopes, w.q.Scopes) {
			continue
		}
		ch.RowID, ch.Payload = ws.arenaText(st, 1), rs.payload(st, 5)
		rs.chs = append(rs.chs, ch)
	}
	if err := r.Err(); err != nil {
		return fmt.Errorf("read commit window: %w", err)
	}
	add()
	return nil
}
