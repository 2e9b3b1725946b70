package syncgo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/syncgo/syncgo/internal/engine"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// POST /commits writes commits given as JSON: the same push as a
// PUSH_COMMIT of /sync (§6), for a backend that does not speak SSP2. The
// caller authenticates as on /sync, its writes are authorized by its
// resolved scopes, and each commit is idempotent by (clientId,
// clientCommitId): a retry answers cached. Rows are JSON objects of the
// current schema version's columns (schema.CompiledTable.JSONValues).
//
//	{"clientId": "billing-worker",
//	 "commits": [{"clientCommitId": "invoice-42",
//	   "operations": [
//	     {"table": "tasks", "op": "upsert", "row": {"id": "t1", "title": "Pay"}, "baseVersion": 3},
//	     {"table": "tasks", "op": "delete", "rowId": "t2"}]}]}
//
// The answer (200) holds one result per commit, in order:
//
//	{"commits": [{"clientCommitId": "invoice-42", "status": "applied", "commitSeq": 57}]}
//
// A rejected commit carries the operations' results (conflicts with the
// server's row as JSON, errors with their codes). A request the server
// refuses as a whole is a §10.1 JSON error with its HTTP status.

// JSONCommitsContentType is the content type of POST /commits.
const JSONCommitsContentType = "application/json"

type jsonCommitsRequest struct {
	ClientID string       `json:"clientId"`
	Commits  []jsonCommit `json:"commits"`
}

type jsonCommit struct {
	ClientCommitID string            `json:"clientCommitId"`
	Operations     []jsonCommitWrite `json:"operations"`
}

type jsonCommitWrite struct {
	Table       string          `json:"table"`
	Op          string          `json:"op"`
	Row         json.RawMessage `json:"row"`
	RowID       *string         `json:"rowId"`
	BaseVersion *int64          `json:"baseVersion"`
}

type jsonCommitsResponse struct {
	Commits []jsonCommitResult `json:"commits"`
}

type jsonCommitResult struct {
	ClientCommitID string         `json:"clientCommitId"`
	Status         string         `json:"status"`
	CommitSeq      int64          `json:"commitSeq,omitempty"`
	Results        []jsonOpResult `json:"results,omitempty"`
}

type jsonOpResult struct {
	OpIndex         int32           `json:"opIndex"`
	Status          string          `json:"status"`
	Code            string          `json:"code,omitempty"`
	Message         string          `json:"message,omitempty"`
	ServerVersion   int64           `json:"serverVersion,omitempty"`
	ServerRow       json.RawMessage `json:"serverRow,omitempty"`
	ConflictColumns []string        `json:"conflictColumns,omitempty"`
	Retryable       bool            `json:"retryable,omitempty"`
	// Details are the rejection's recovery metadata (§6.3.1), if any.
	Details json.RawMessage `json:"details,omitempty"`
}

func (s *Server) handleJSONCommits(w http.ResponseWriter, r *http.Request) {
	const route = "commits"
	if !s.mediaTypeIs(w, r, route, JSONCommitsContentType, syncerr.CodeInvalidRequest) {
		return
	}
	auth, ok := s.admitCaller(w, r, route)
	if !ok {
		return
	}
	body, releaseBody, err := s.readBody(w, r, s.cfg.MaxRequestBytes)
	defer releaseBody()
	if errors.Is(err, errBodyMemory) {
		s.refuseBodyMemory(w, route)
		return
	}
	if err != nil {
		w.Header().Set("Connection", "close")
		s.writeError(w, route, badBody(err))
		return
	}
	commits, clientID, perr := decodeJSONCommits(s.cfg.Schema, body, s.eng.Limits().MaxOperationsPerRequest)
	if perr != nil {
		s.writeError(w, route, perr)
		return
	}
	noteOp(w, opPush)
	release, refusal := s.admit.acquire(r.Context())
	if refusal != nil {
		if syncerr.As(refusal) != nil {
			w.Header().Set("Retry-After", s.admit.retryAfter())
			s.writeError(w, route, refusal)
		}
		return
	}
	defer release()
	out, err := s.pushJSONCommits(r.Context(), engine.Auth{ActorID: auth.ActorID, Partition: auth.Partition}, clientID, commits)
	if err != nil {
		s.writeError(w, route, err)
		return
	}
	b, err := json.Marshal(out)
	if err != nil {
		s.writeError(w, route, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}

// decodeJSONCommits reads a POST /commits body into PUSH_COMMIT frames of
// the current schema version; more than maxOps operations in all are
// refused before any row is converted.
func decodeJSONCommits(sc *schema.Compiled, body []byte, maxOps int) ([]*wire.PushCommit, string, *syncerr.Error) {
	bad := func(format string, args ...any) *syncerr.Error {
		return syncerr.New(syncerr.CodeInvalidRequest, fmt.Sprintf(format, args...))
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var req jsonCommitsRequest
	if err := dec.Decode(&req); err != nil {
		return nil, "", bad("the body is not a commits request: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, "", bad("the body holds more than one JSON value")
	}
	if req.ClientID == "" {
		return nil, "", bad("clientId is required")
	}
	if len(req.Commits) == 0 {
		return nil, "", bad("commits is empty")
	}
	ops := 0
	for _, c := range req.Commits {
		ops += max(1, len(c.Operations))
	}
	if ops > maxOps {
		return nil, "", syncerr.New(syncerr.CodeTooManyOperations, "the request carries more operations than the server accepts")
	}
	commits := make([]*wire.PushCommit, len(req.Commits))
	for i, c := range req.Commits {
		if c.ClientCommitID == "" {
			return nil, "", bad("commits[%d]: clientCommitId is required", i)
		}
		if len(c.Operations) == 0 {
			return nil, "", bad("commits[%d]: operations is empty", i)
		}
		pc := &wire.PushCommit{ClientCommitID: c.ClientCommitID, Operations: make([]wire.Operation, len(c.Operations))}
		for j, o := range c.Operations {
			at := fmt.Sprintf("commits[%d].operations[%d]", i, j)
			t, ok := sc.Table(o.Table)
			if !ok {
				return nil, "", bad("%s: the schema has no table %q", at, o.Table)
			}
			if o.BaseVersion != nil && *o.BaseVersion < 0 {
				return nil, "", bad("%s: baseVersion is negative", at)
			}
			op := wire.Operation{Table: o.Table, BaseVersion: o.BaseVersion}
			switch o.Op {
			case "upsert":
				if len(o.Row) == 0 {
					return nil, "", bad("%s: an upsert needs a row", at)
				}
				values, err := t.JSONValues(o.Row)
				if err != nil {
					return nil, "", bad("%s: %v", at, err)
				}
				if op.RowID, op.Payload, err = t.EncodeUpsert(values); err != nil {
					return nil, "", bad("%s: %v", at, err)
				}
				if o.RowID != nil && *o.RowID != op.RowID {
					return nil, "", bad("%s: rowId %q is not the row's primary key %q", at, *o.RowID, op.RowID)
				}
				op.Op = wire.OpUpsert
			case "delete":
				if o.RowID == nil || *o.RowID == "" {
					return nil, "", bad("%s: a delete needs a rowId", at)
				}
				if len(o.Row) != 0 {
					return nil, "", bad("%s: a delete carries no row", at)
				}
				op.Op, op.RowID = wire.OpDelete, *o.RowID
			default:
				return nil, "", bad("%s: op must be upsert or delete, not %q", at, o.Op)
			}
			pc.Operations[j] = op
		}
		commits[i] = pc
	}
	return commits, req.ClientID, nil
}

// pushJSONCommits serves the commits as a push of the current schema
// version under the partition's log epoch (taken again once if it
// changed meanwhile) and renders the results.
func (s *Server) pushJSONCommits(ctx context.Context, auth engine.Auth, clientID string, commits []*wire.PushCommit) (*jsonCommitsResponse, error) {
	epoch := s.eng.PartitionEpoch(ctx, auth.Partition)
	for range 2 {
		req := &wire.Request{Version: wire.Version3,
			Header:  &wire.ReqHeader{ClientID: clientID, SchemaVersion: s.cfg.Schema.Version(), LogEpoch: &epoch},
			Commits: commits}
		var resp bufferResponder
		if err := s.eng.Serve(ctx, auth, req, &resp); err != nil {
			return nil, err
		}
		m, err := wire.DecodeMessage(resp.Bytes(), wire.DecoderOptions{Kind: wire.KindResponse})
		if err != nil {
			return nil, fmt.Errorf("commits: decode the engine's response: %w", err)
		}
		if len(m.Frames) > 0 {
			if h, ok := m.Frames[0].(*wire.RespHeader); ok && h.ResetRequired {
				epoch = h.LogEpoch // a new partition, or a restore in between
				continue
			}
		}
		// One PUSH_RESULT per commit, in request order (§6.3). A failure
		// once results were written is Serve's error above: the commits
		// before it may stand, and a retry of the same body answers them
		// cached.
		out := &jsonCommitsResponse{Commits: make([]jsonCommitResult, 0, len(commits))}
		for _, f := range m.Frames {
			switch f := f.(type) {
			case *wire.PushResult:
				if i := len(out.Commits); i < len(commits) {
					out.Commits = append(out.Commits, s.jsonCommitResult(commits[i], f))
				}
			case *wire.PushResultDetails:
				// The details of the result just read (§6.3.1).
				if n := len(out.Commits); n > 0 && out.Commits[n-1].ClientCommitID == f.ClientCommitID {
					addDetails(&out.Commits[n-1], f.Entries)
				}
			}
		}
		if len(out.Commits) != len(commits) {
			return nil, fmt.Errorf("commits: %d results for %d commits", len(out.Commits), len(commits))
		}
		return out, nil
	}
	return nil, syncerr.New(syncerr.CodeInternalError, "the partition's log epoch changed twice while the commits were written; retry")
}

// jsonCommitResult renders the PUSH_RESULT of commit c; a conflict's
// server row is decoded with the table of the operation it answers.
func (s *Server) jsonCommitResult(c *wire.PushCommit, f *wire.PushResult) jsonCommitResult {
	out := jsonCommitResult{ClientCommitID: f.ClientCommitID, Status: f.Status.String()}
	if f.Status != wire.PushRejected {
		out.CommitSeq = f.CommitSeq
	}
	ops := c.Operations
	for _, r := range f.Results {
		jr := jsonOpResult{OpIndex: r.OpIndex, Status: r.Status.String(), Code: r.Code, Message: r.Message,
			ServerVersion: r.ServerVersion, Retryable: r.Retryable}
		if int(r.OpIndex) < len(ops) {
			if t, ok := s.cfg.Schema.Table(ops[r.OpIndex].Table); ok {
				if len(r.ServerRow) > 0 {
					if vals, err := t.RowCodec().DecodeRow(r.ServerRow); err == nil {
						if b, err := t.AppendJSON(nil, vals); err == nil {
							jr.ServerRow = b
						}
					}
				}
				for i, c := range t.Columns() {
					if i/8 < len(r.ConflictColumns) && r.ConflictColumns[i/8]&(1<<(i%8)) != 0 {
						jr.ConflictColumns = append(jr.ConflictColumns, c.Name)
					}
				}
			}
		}
		out.Results = append(out.Results, jr)
	}
	return out
}

// addDetails attaches the rejection details of a PUSH_RESULT_DETAILS to
// the operation results they belong to.
func addDetails(r *jsonCommitResult, entries []wire.DetailEntry) {
	for _, e := range entries {
		for i := range r.Results {
			if r.Results[i].OpIndex == e.OpIndex && json.Valid([]byte(e.DetailsJSON)) {
				r.Results[i].Details = json.RawMessage(e.DetailsJSON)
			}
		}
	}
}

// bufferResponder keeps a response the engine encodes in memory.
type bufferResponder struct{ bytes.Buffer }

func (b *bufferResponder) Begin(version uint16) (*wire.Encoder, error) {
	return wire.NewEncoder(&b.Buffer, wire.KindResponse, version)
}
