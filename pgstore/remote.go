package pgstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/syncgo/syncgo/store"
)

var _ store.RemoteQuerier = (*Store)(nil)

// RemoteTarget implements store.RemoteQuerier: Postgres, tables in the
// schema the connections' search_path selected at Open.
func (s *Store) RemoteTarget() store.RemoteTarget {
	return store.RemoteTarget{Dialect: store.DialectPostgres, Schema: s.dbSchema}
}

// RemoteQuery implements store.RemoteQuerier. The statement runs on a
// pooled connection in a read-only REPEATABLE READ transaction (Postgres
// refuses any write in it), which first reads the partition's
// maxCommitSeq: the snapshot is taken by that first statement, so both
// reads see the same commits. The transaction's four statements go in one
// pipeline: one round trip (a grant query runs at every request).
func (s *Store) RemoteQuery(ctx context.Context, partition string, rs store.RemoteStatement) (store.RemoteResult, error) {
	if err := s.check(); err != nil {
		return store.RemoteResult{}, err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return store.RemoteResult{}, fmt.Errorf("remote query: %w", err)
	}
	defer conn.Release()
	b := &pgx.Batch{}
	b.Queue("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
	if rs.ServeGate {
		// The transaction's first statement: it takes the snapshot the
		// statement reads too.
		b.Queue(sqlServeGate, partition, rs.Running)
	}
	if !rs.NoCommitSeq {
		b.Queue("SELECT max_commit_seq FROM sync_partitions WHERE partition = $1", partition)
	}
	b.Queue(rs.SQL, rs.Args...)
	b.Queue("COMMIT")
	br := conn.SendBatch(ctx, b)
	res, err := readRemote(br, rs.ServeGate, !rs.NoCommitSeq)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		// A failed statement leaves the transaction open and aborted.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_, _ = conn.Exec(rctx, "ROLLBACK") // on failure the pool discards the connection (not idle)
		cancel()
		return store.RemoteResult{}, err
	}
	return res, nil
}

// readRemote reads the results of RemoteQuery's pipeline.
func readRemote(br pgx.BatchResults, gate, commitSeq bool) (store.RemoteResult, error) {
	var res store.RemoteResult
	if _, err := br.Exec(); err != nil {
		return res, fmt.Errorf("remote query: %w", err) // the first failure of the pipeline: a parse error too
	}
	if gate {
		g, err := readServeGate(br.QueryRow())
		if err != nil {
			return res, fmt.Errorf("remote query: %w", err)
		}
		res.Gate = &g
	}
	if commitSeq {
		err := br.QueryRow().Scan(&res.MaxCommitSeq)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return res, fmt.Errorf("remote query: read max commit seq: %w", err)
		}
	}
	rows, err := br.Query()
	if err != nil {
		return res, err
	}
	for _, fd := range rows.FieldDescriptions() {
		res.Columns = append(res.Columns, fd.Name)
	}
	fds := rows.FieldDescriptions()
	tm := rows.Conn().TypeMap()
	for rows.Next() {
		raw := rows.RawValues()
		vals := make([]any, len(fds))
		for i := range fds {
			v, err := remoteValue(tm, &fds[i], raw[i])
			if err == nil {
				vals[i], err = plainValue(v)
			}
			if err != nil {
				rows.Close()
				return res, fmt.Errorf("remote query: column %s: %w", res.Columns[i], err)
			}
		}
		res.Rows = append(res.Rows, vals)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return res, err
	}
	if _, err := br.Exec(); err != nil {
		return res, fmt.Errorf("remote query: commit: %w", err)
	}
	return res, nil
}

// remoteValue decodes one field of a result row as rows.Values does,
// except a json or jsonb document, which is its text (a jsonb's without
// the spaces Postgres writes after ':' and ','): decoding it into Go
// values would turn a JSON string into the bare string, JSON null into
// NULL, and round numbers to float64 (or fail on one beyond float64's
// range).
func remoteValue(tm *pgtype.Map, fd *pgconn.FieldDescription, raw []byte) (any, error) {
	if raw == nil {
		return nil, nil
	}
	if fd.DataTypeOID == pgtype.JSONOID || fd.DataTypeOID == pgtype.JSONBOID {
		var s string
		if err := tm.Scan(fd.DataTypeOID, fd.Format, raw, &s); err != nil {
			return nil, err
		}
		if fd.DataTypeOID == pgtype.JSONBOID {
			var b bytes.Buffer
			if err := json.Compact(&b, []byte(s)); err != nil {
				return nil, err
			}
			s = b.String()
		}
		return s, nil
	}
	if dt, ok := tm.TypeForOID(fd.DataTypeOID); ok {
		return dt.Codec.DecodeValue(tm, fd.DataTypeOID, fd.Format, raw)
	}
	if fd.Format == pgtype.TextFormatCode {
		return string(raw), nil
	}
	return bytes.Clone(raw), nil
}

// plainValue converts what pgx decodes to the values of
// store.RemoteResult: integers to int64, floats and numerics to float64,
// times to RFC 3339 text, UUIDs to their text, JSON documents to their
// text.
func plainValue(v any) (any, error) {
	switch x := v.(type) {
	case nil, int64, float64, string, []byte, bool:
		return v, nil
	case int16:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case int:
		return int64(x), nil
	case float32:
		return float64(x), nil
	case pgtype.Numeric:
		if !x.Valid {
			return nil, nil
		}
		f, err := x.Float64Value()
		if err != nil || !f.Valid {
			return nil, fmt.Errorf("numeric %v: %w", x, err)
		}
		return f.Float64, nil
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano), nil
	case [16]byte:
		return fmt.Sprintf("%x-%x-%x-%x-%x", x[0:4], x[4:6], x[6:8], x[8:10], x[10:16]), nil
	case map[string]any, []any:
		b, err := json.Marshal(x)
		if err != nil {
			return nil, err
		}
		return string(b), nil
	}
	return nil, fmt.Errorf("a %T has no remote query value", v)
}
