package pgstore

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/syncgo/syncgo/internal/rowbuf"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// ReadCommitWindow reads the commits of (AfterSeq, ThroughSeq] that change
// rows of the table inside the effective scopes. Candidates come from the
// change scope index on the first key (sqlCommitWindow), a page of commits
// per statement; every change is checked against every key with
// store.MatchScopes. A commit that would take the changes past
// LimitChanges stops the scan (Complete false), unless it is the first.
func (s *Store) ReadCommitWindow(ctx context.Context, partition string, q store.CommitWindowQuery) (store.CommitWindow, error) {
	return retry(s, ctx, "ReadCommitWindow", func() (store.CommitWindow, error) { return s.readCommitWindowOnce(ctx, partition, q) })
}

// readCommitWindowOnce is ReadCommitWindow, once (see "Lost connections", retry.go).
func (s *Store) readCommitWindowOnce(ctx context.Context, partition string, q store.CommitWindowQuery) (store.CommitWindow, error) {
	ts, err := s.table(q.Table)
	if err != nil {
		return store.CommitWindow{}, err
	}
	if len(q.Scopes) == 0 {
		return store.CommitWindow{}, scanRequiresScope()
	}
	first, _, ok := splitScopes(q.Scopes)
	if !ok || q.ThroughSeq <= q.AfterSeq {
		return store.CommitWindow{Complete: true}, nil
	}
	if q.ThroughSeq-q.AfterSeq <= s.shortWindow {
		win, err := s.readSharedWindow(ctx, partition, ts.name, q)
		if !errors.Is(err, errShortWindowCut) {
			return win, err
		}
	}
	page := defaultWindowPageCommits
	if q.LimitChanges > 0 {
		// Every matching commit has a matching change, so limit+1
		// candidates decide the answer unless the other keys filter some
		// out; then the next pages grow.
		page = min(q.LimitChanges+1, defaultWindowPageCommits)
	}
	w := windowReader{limit: q.LimitChanges, scopes: q.Scopes, headsSQL: sqlRangeCommits}
	if q.WireOnly {
		w.headsSQL = sqlRangeCommitsWire
	}
	w.sameScopes(q.Scopes)
	sc, _ := s.windowScratch.Get().(*windowScratch)
	if sc == nil {
		sc = &windowScratch{}
	}
	w.cands, w.heads = sc.cands[:0], sc.heads[:0]
	defer func() {
		// Neither escapes into the window: the commits copy the heads'
		// fields, and the candidates are only compared with.
		sc.cands, sc.heads = w.cands[:0], w.heads[:0]
		s.windowScratch.Put(sc)
	}()
	if q.StateAfter {
		w.running = &q.Running
	}
	bufs, _ := s.windowBufs.Get().(*windowBufs)
	if bufs == nil {
		bufs = &windowBufs{}
	}
	w.commits, w.chs, w.arena, w.scan.strs = bufs.commits, bufs.chs, bufs.arena, bufs.strs
	after := q.AfterSeq
	// A bulk window (the next window of a catch-up, read ahead) is read
	// by ranges of the log without the candidate walk while its ranges
	// stay dense (readRange); a sparse one goes on by candidates.
	ranged := q.Bulk
	for {
		if ranged {
			hi := q.ThroughSeq
			if hi-after > int64(page) {
				hi = after + int64(page)
			}
			before := len(w.commits)
			if err := w.readRange(ctx, s, partition, ts.name, after, hi); err != nil {
				return store.CommitWindow{}, fmt.Errorf("read commit window: %w", err)
			}
			if w.full || hi == q.ThroughSeq {
				return w.window(s, bufs, !w.full), nil
			}
			ranged = rangeDensity*int64(len(w.commits)-before) >= hi-after
			after, page = hi, min(2*page, defaultWindowPageCommits)
			continue
		}
		candidates, last, err := w.readPage(ctx, s, partition, ts.name, first, after, q.ThroughSeq, page)
		if err != nil {
			return store.CommitWindow{}, fmt.Errorf("read commit window: %w", err)
		}
		if w.full || candidates < page {
			return w.window(s, bufs, !w.full), nil
		}
		after, page = last, min(2*page, defaultWindowPageCommits)
	}
}

// windowBufs is the memory of a paged window that its caller released
// (CommitWindow.Release): the commits' and changes' backing arrays and
// the arenas of their payloads and strings, reused by the next window
// instead of about 270 KB of new allocations per 1,000 commits.
type windowBufs struct {
	commits     []store.Commit
	chs         []store.Change
	arena, strs rowbuf.Arena
}

// window returns the window read, whose Release gives its memory back to
// s.windowBufs in bufs (once; a second call does nothing).
func (w *windowReader) window(s *Store, bufs *windowBufs, complete bool) store.CommitWindow {
	commits, chs, arena, strs := w.commits, w.chs, w.arena, w.scan.strs
	released := false
	return store.CommitWindow{Commits: commits, Complete: complete, State: w.state, Release: func() {
		if released {
			return
		}
		released = true
		// No reference to the window's strings and scopes stays behind.
		clear(commits)
		clear(chs)
		arena.Reset()
		strs.Reset()
		bufs.commits, bufs.chs, bufs.arena, bufs.strs = commits[:0], chs[:0], arena, strs
		s.windowBufs.Put(bufs)
	}}
}

// windowScratch is what a window read takes from Store.windowScratch and
// gives back: its candidates' and commit rows' buffers, which a catch-up
// fills to a page (1,024) per window. Without it every window grew both
// from nothing, about 90 KB of allocations each.
type windowScratch struct {
	cands []int64
	heads []commitHead
}

// windowReader accumulates the commits of a window.
type windowReader struct {
	limit   int
	scopes  wire.ScopeMap
	commits []store.Commit
	changes int
	// full is set when a matching commit did not fit.
	full  bool
	scan  windowScan
	cands []int64
	heads []commitHead
	// chs is the backing array of the commits' changes and arena holds
	// their payloads: the commits returned point into both, so neither is
	// ever cut back while a window is read.
	chs   []store.Change
	arena rowbuf.Arena
	// headsSQL is the commit rows' range read: sqlRangeCommits, or
	// sqlRangeCommitsWire for a WireOnly window.
	headsSQL string
	// same are the stored scopes that sqlRangeChanges sends as NULL
	// (sameJSON, its $5), when the scopes have one value per key.
	same     wire.StoredScopes
	sameJSON string
	// running, when set, asks each page's round trip to read the
	// partition and the serve gate after its rows (StateAfter); state is
	// the last page's.
	running *int32
	state   *store.RequestState
}

// sameScopes sets w.same and w.sameJSON when every key of the scopes has
// one value: the stored scopes {key: value, ...} are then those of most
// changes of the window (all of them when the table's scope columns are
// the window's keys), and sqlRangeChanges sends NULL instead of them.
func (w *windowReader) sameScopes(scopes wire.ScopeMap) {
	m := make(map[string]string, len(scopes))
	for _, e := range scopes {
		if len(e.Values) == 0 || slices.ContainsFunc(e.Values[1:], func(v string) bool { return v != e.Values[0] }) {
			return
		}
		m[e.Key] = e.Values[0]
	}
	doc, err := json.Marshal(m)
	if err != nil {
		return
	}
	w.same, w.sameJSON = store.ScopesFromMap(m), string(doc)
}

// sameArg is sqlRangeChanges' $5: w.sameJSON, or NULL.
func (w *windowReader) sameArg() any {
	if w.same == nil {
		return nil
	}
	return w.sameJSON
}

// payload copies b into the arena (nil stays nil).
func (w *windowReader) payload(b []byte) []byte { return w.arena.Copy(b) }

// windowRow is one row of sqlCommitWindow or sqlRangeChanges: a
// candidate commit (commit false when it was pruned while the window was
// read, and always in sqlRangeChanges, whose commit columns are NULL) and
// one of its changes (change false when it has none of the table).
type windowRow struct {
	seq                         int64
	commit, change              bool
	createdAt, rowVersion       int64
	actor, client, clientCommit string
	rowID                       string
	op                          wire.Op
	scopes, payload             []byte
}

// scan reads the row through pgx's Scan (any result format).
func (r *windowRow) scan(rows pgx.Rows) error {
	var (
		createdAt, rowVersion              *int64
		actor, client, clientCommit, rowID *string
		op                                 *int16
	)
	if err := rows.Scan(&r.seq, &createdAt, &actor, &client, &clientCommit, &rowID, &op, &rowVersion, &r.scopes, &r.payload); err != nil {
		return err
	}
	if r.commit = createdAt != nil; r.commit {
		r.createdAt, r.actor, r.client, r.clientCommit = *createdAt, *actor, *client, *clientCommit
	}
	if r.change = rowID != nil; r.change {
		r.rowID, r.op = *rowID, wire.Op(*op)
		if rowVersion != nil {
			r.rowVersion = *rowVersion
		}
	}
	return nil
}

// The OIDs of sqlCommitWindow's columns, in order.
var windowColumnOIDs = [...]uint32{pgtype.Int8OID, pgtype.Int8OID, pgtype.TextOID, pgtype.TextOID, pgtype.TextOID,
	pgtype.TextOID, pgtype.Int2OID, pgtype.Int8OID, pgtype.JSONBOID, pgtype.ByteaOID}

// rawWindowFormats reports whether the result has sqlCommitWindow's
// columns with the integers and the bytea in binary format (what pgx asks
// for with a prepared statement), which fromRaw reads, and the format of
// the JSONB (pgx asks for text).
func rawWindowFormats(fds []pgconn.FieldDescription) (ok, jsonbBinary bool) {
	if len(fds) != len(windowColumnOIDs) {
		return false, false
	}
	for i, fd := range fds {
		if fd.DataTypeOID != windowColumnOIDs[i] {
			return false, false
		}
		switch fd.DataTypeOID {
		case pgtype.TextOID:
		case pgtype.JSONBOID:
			jsonbBinary = fd.Format == pgtype.BinaryFormatCode
		default:
			if fd.Format != pgtype.BinaryFormatCode {
				return false, false
			}
		}
	}
	return true, jsonbBinary
}

// fromRaw reads the row from its raw values (rawWindowFormats):
// no Scan through interfaces and pointers, and one string for a run of
// equal actors and clients. The payload and the scopes are the raw
// values themselves, valid until the next row (readRows copies the
// payload into its arena, decodeScopes copies what it keeps).
func (r *windowRow) fromRaw(v [][]byte, jsonbBinary bool, ws *windowScan) error {
	int8At := func(i int) (int64, bool, error) {
		switch len(v[i]) {
		case 8:
			return int64(binary.BigEndian.Uint64(v[i])), true, nil
		case 0:
			if v[i] == nil {
				return 0, false, nil
			}
		}
		return 0, false, fmt.Errorf("read commit window: column %d: %d bytes for an int8", i, len(v[i]))
	}
	var err error
	if r.seq, _, err = int8At(0); err != nil {
		return err
	}
	if r.createdAt, r.commit, err = int8At(1); err != nil {
		return err
	}
	if r.commit {
		ws.actor, ws.client = intern(v[2], ws.actor), intern(v[3], ws.client)
		r.actor, r.client, r.clientCommit = ws.actor, ws.client, ws.text(v[4])
	}
	if r.change = v[5] != nil; !r.change {
		return nil
	}
	r.rowID = ws.text(v[5])
	if len(v[6]) != 2 {
		return fmt.Errorf("read commit window: %d bytes for an int2", len(v[6]))
	}
	r.op = wire.Op(int16(binary.BigEndian.Uint16(v[6])))
	if r.rowVersion, _, err = int8At(7); err != nil {
		return err
	}
	r.scopes = v[8]
	if r.scopes != nil && jsonbBinary {
		// A version byte (1), then the JSON text.
		if len(v[8]) == 0 || v[8][0] != 1 {
			return fmt.Errorf("read commit window: scopes: JSONB binary version %v", v[8][:min(len(v[8]), 1)])
		}
		r.scopes = v[8][1:]
	}
	r.payload = v[9]
	return nil
}

// intern returns prev when b spells it, else a new string.
func intern(b []byte, prev string) string {
	if string(b) == prev {
		return prev
	}
	return string(b)
}

// windowScan is what a window read reuses from row to row: the last
// stored scopes and their decoding (the changes of one scope mostly store
// the same scopes, so they share one decoded, read-only StoredScopes) and
// the last actor and client.
type windowScan struct {
	scopesRaw     []byte
	scopes        wire.StoredScopes
	actor, client string
	// strs holds the bytes of the row ids and client commit ids read
	// (text): one allocation per block instead of one per string.
	strs rowbuf.Arena
}

// text returns b as a string whose bytes live in the scan's string
// arena.
func (ws *windowScan) text(b []byte) string { return ws.strs.String(b) }

// decodeScopes decodes a scopes column, or returns the last decoding
// when the bytes are the same.
func (ws *windowScan) decodeScopes(b []byte) (wire.StoredScopes, error) {
	if ws.scopes != nil && string(b) == string(ws.scopesRaw) {
		return ws.scopes, nil
	}
	sc, err := decodeScopes(b)
	if err != nil {
		return nil, err
	}
	ws.scopesRaw, ws.scopes = append(ws.scopesRaw[:0], b...), sc
	return sc, nil
}

// readPage reads the candidates of one page and adds the matching commits
// until one does not fit. It returns the number of candidates and the
// last candidate sequence. The candidates are read first (an index-only
// walk); when they are dense in their range of the log, as in the
// catch-up of a scope that most commits touch, the commits and changes
// are read by two ordered range scans merged (sqlRangeCommits and
// sqlRangeChanges, some 50 buffer reads for 1,000 commits), else by a probe per candidate
// (sqlCommitWindow, 8 buffer reads per candidate), which stays
// proportional to the candidates however sparse they are.
func (w *windowReader) readPage(ctx context.Context, s *Store, partition, table string, first wire.ScopeValues, after, through int64, page int) (int, int64, error) {
	cands, err := w.candidates(ctx, s, partition, table, first, after, through, page)
	if err != nil || len(cands) == 0 {
		return 0, 0, err
	}
	// Room for every candidate's commit and one change each: a
	// catch-up's window grows its slices once, a round's stays small.
	w.commits = slices.Grow(w.commits, len(cands))
	if cap(w.chs)-len(w.chs) < len(cands) {
		// A new backing array: the commits added point into the old one.
		w.chs = make([]store.Change, 0, len(cands))
	}
	lo, hi := cands[0], cands[len(cands)-1]
	b := &pgx.Batch{}
	dense := hi-lo+1 <= int64(rangeDensity*len(cands))
	if dense {
		b.Queue(w.headsSQL, partition, lo, hi)
		b.Queue(sqlRangeChanges, partition, table, lo, hi, w.sameArg())
	} else {
		b.Queue(sqlCommitWindow, partition, table, first.Key, first.Values, after, through, page)
	}
	if w.running != nil {
		// The partition and the serve gate after the rows, in the same
		// round trip (each statement's snapshot follows the ones before).
		queuePartitionState(b, partition, *w.running)
	}
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	if dense {
		if err := w.readHeads(br, cands); err != nil {
			return 0, 0, err
		}
	} else {
		cands = nil
	}
	rows, err := br.Query()
	if err != nil {
		return 0, 0, err
	}
	n, last, err := w.readRows(rows, table, cands, dense)
	if err != nil || w.running == nil {
		return n, last, err
	}
	st, err := readPartitionState(br, partition)
	if err != nil {
		return 0, 0, err
	}
	w.state = &st
	return n, last, nil
}

// readRange reads every commit of (after, hi] of the log and its changes
// of the table (sqlRangeCommits, sqlRangeChanges: two ordered range scans
// in one round trip, no candidate walk) and adds those with changes inside
// the scopes until one does not fit. Every change of the range is read and
// checked with store.MatchScopes, so the range's commits outside the
// scopes cost their rows but never enter the window. A commit of the range
// is visible whole or not at all (its rows are one transaction's, and hi
// is at most the ThroughSeq read before), so a change without its commit
// row is a pruned commit's, skipped as readPage skips it.
func (w *windowReader) readRange(ctx context.Context, s *Store, partition, table string, after, hi int64) error {
	b := &pgx.Batch{}
	b.Queue(w.headsSQL, partition, after+1, hi)
	b.Queue(sqlRangeChanges, partition, table, after+1, hi, w.sameArg())
	if w.running != nil {
		queuePartitionState(b, partition, *w.running)
	}
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	if err := w.readHeads(br, nil); err != nil {
		return err
	}
	n := int(hi - after)
	w.commits = slices.Grow(w.commits, min(n, max(w.limit-w.changes, 0)+1))
	if cap(w.chs)-len(w.chs) < n {
		// A new backing array: the commits added point into the old one.
		w.chs = make([]store.Change, 0, n)
	}
	rows, err := br.Query()
	if err != nil {
		return err
	}
	if _, _, err := w.readRows(rows, table, nil, true); err != nil || w.running == nil {
		return err
	}
	st, err := readPartitionState(br, partition)
	if err != nil {
		return err
	}
	w.state = &st
	return nil
}

// commitHead is a commit's row without its changes.
type commitHead struct {
	seq, createdAt              int64
	actor, client, clientCommit string
}

// readHeads reads the result of sqlRangeCommits into w.heads, the
// candidates' only (every commit's when cands is nil).
func (w *windowReader) readHeads(br pgx.BatchResults, cands []int64) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	w.heads = slices.Grow(w.heads[:0], len(cands))
	all := cands == nil
	next := 0
	raw := rawHeadFormats(rows.FieldDescriptions())
	var (
		h                   commitHead
		actor, client, ccid []byte
	)
	for rows.Next() {
		if raw {
			v := rows.RawValues()
			var ok1, ok2 bool
			h.seq, ok1 = rawInt8(v[0])
			h.createdAt, ok2 = rawInt8(v[1])
			if !ok1 || !ok2 {
				return fmt.Errorf("read commit window: commit row: %d and %d bytes for int8s", len(v[0]), len(v[1]))
			}
			actor, client, ccid = v[2], v[3], v[4]
		} else if err := rows.Scan(&h.seq, &h.createdAt, &actor, &client, &ccid); err != nil {
			return err
		}
		for next < len(cands) && cands[next] < h.seq {
			next++
		}
		if !all && (next == len(cands) || cands[next] != h.seq) {
			continue
		}
		ws := &w.scan
		ws.actor, ws.client = intern(actor, ws.actor), intern(client, ws.client)
		h.actor, h.client, h.clientCommit = ws.actor, ws.client, ws.text(ccid)
		w.heads = append(w.heads, h)
	}
	return rows.Err()
}

// rawInt8 reads a binary int8 value.
func rawInt8(v []byte) (int64, bool) {
	if len(v) != 8 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(v)), true
}

// rawHeadFormats reports whether the result has sqlRangeCommits' columns
// with its integers in binary format (what pgx asks for with a prepared
// statement), which readHeads reads from the raw values.
func rawHeadFormats(fds []pgconn.FieldDescription) bool {
	want := [...]uint32{pgtype.Int8OID, pgtype.Int8OID, pgtype.TextOID, pgtype.TextOID, pgtype.TextOID}
	if len(fds) != len(want) {
		return false
	}
	for i, fd := range fds {
		if fd.DataTypeOID != want[i] || (want[i] == pgtype.Int8OID && fd.Format != pgtype.BinaryFormatCode) {
			return false
		}
	}
	return true
}

// rangeDensity: the candidates are read by range when their range of the
// log is at most this many times their number.
const rangeDensity = 4

// candidates reads the page's candidate sequences, in order.
func (w *windowReader) candidates(ctx context.Context, s *Store, partition, table string, first wire.ScopeValues, after, through int64, page int) ([]int64, error) {
	rows, err := s.pool.Query(ctx, sqlWindowCandidates, partition, table, first.Key, first.Values, after, through, page)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	w.cands = w.cands[:0]
	fds := rows.FieldDescriptions()
	raw := len(fds) == 1 && fds[0].DataTypeOID == pgtype.Int8OID && fds[0].Format == pgtype.BinaryFormatCode
	var seq int64
	for rows.Next() {
		if raw {
			var ok bool
			if seq, ok = rawInt8(rows.RawValues()[0]); !ok {
				return nil, fmt.Errorf("read commit window: candidate: %d bytes for an int8", len(rows.RawValues()[0]))
			}
		} else if err := rows.Scan(&seq); err != nil {
			return nil, err
		}
		w.cands = append(w.cands, seq)
	}
	return w.cands, rows.Err()
}

// readRows adds the commits of rows: the rows of sqlCommitWindow (cands
// nil, heads false: every row's commit is a candidate, a commit row
// missing when it was pruned), or of sqlRangeChanges (heads true: their
// commit rows are in w.heads, a commit without one was pruned) over the
// range of cands, whose commits outside cands are skipped and whose
// candidates without rows (pruned) count all the same, or over a range
// read whole (cands nil). It returns the number of candidates and the
// last one read.
func (w *windowReader) readRows(rows pgx.Rows, table string, cands []int64, heads bool) (int, int64, error) {
	defer rows.Close()
	var (
		candidates int
		last       int64
		cur        store.Commit
		started    bool
		valid      bool
		from       = len(w.chs) // cur's first change in w.chs
	)
	flush := func() {
		if !started || !valid || len(w.chs) == from || w.full {
			return
		}
		cur.Changes = w.chs[from:len(w.chs):len(w.chs)]
		n := len(cur.Changes)
		if w.limit > 0 && len(w.commits) > 0 && w.changes+n > w.limit {
			w.full = true
			return
		}
		w.commits = append(w.commits, cur)
		w.changes += n
		from = len(w.chs)
	}
	next, head := 0, 0 // the next candidate of cands, of w.heads
	raw, jsonbBinary := rawWindowFormats(rows.FieldDescriptions())
	var row windowRow
	for rows.Next() {
		row = windowRow{}
		var err error
		if raw {
			err = row.fromRaw(rows.RawValues(), jsonbBinary, &w.scan)
		} else {
			err = row.scan(rows)
		}
		if err != nil {
			return 0, 0, err
		}
		if cands != nil {
			// Candidates below the row have no rows: pruned.
			for next < len(cands) && cands[next] < row.seq {
				next++
			}
			if next == len(cands) || cands[next] != row.seq {
				continue // not a candidate
			}
		}
		if heads {
			for head < len(w.heads) && w.heads[head].seq < row.seq {
				head++
			}
			// A candidate without a commit row was pruned.
			if row.commit = head < len(w.heads) && w.heads[head].seq == row.seq; row.commit {
				h := &w.heads[head]
				row.createdAt, row.actor, row.client, row.clientCommit = h.createdAt, h.actor, h.client, h.clientCommit
			}
		}
		if !started || row.seq != last {
			flush()
			if w.full {
				return candidates, last, nil
			}
			// The changes of a commit that was not kept are dropped.
			w.chs = w.chs[:from]
			candidates++
			last, started = row.seq, true
			// A commit pruned while the window was read has no row.
			valid = row.commit
			cur = store.Commit{Seq: row.seq}
			if valid {
				cur.CreatedAtMs, cur.ActorID, cur.ClientID, cur.ClientCommitID = row.createdAt, row.actor, row.client, row.clientCommit
			}
		}
		if !row.change || !valid {
			continue
		}
		ch := store.Change{Table: table, RowID: row.rowID, Op: row.op, RowVersion: row.rowVersion}
		switch {
		case row.scopes != nil:
			if ch.Scopes, err = w.scan.decodeScopes(row.scopes); err != nil {
				return 0, 0, err
			}
		case w.same != nil: // sqlRangeChanges: they equal w.sameJSON
			ch.Scopes = w.same
		default:
			return 0, 0, fmt.Errorf("read commit window: commit %d: change without scopes", row.seq)
		}
		if store.MatchScopes(ch.Scopes, w.scopes) {
			ch.Payload = w.payload(row.payload)
			w.chs = append(w.chs, ch)
		}
	}
	if err := rows.Err(); err != nil {
		return 0, 0, err
	}
	flush()
	if cands != nil && !w.full {
		return len(cands), cands[len(cands)-1], nil
	}
	return candidates, last, nil
}
