package syncgo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/syncgo/syncgo/internal/engine"
	"github.com/syncgo/syncgo/internal/remotewire"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// The error codes of REMOTE.md §7.
const (
	codeOpUnknown            = "operation.unknown"
	codeOpForbidden          = "operation.forbidden"
	codeOpInvalidRequest     = "operation.invalid_request"
	codeOpResultTooLarge     = "operation.result_too_large"
	codeOpStorageUnsupported = "operation.storage_unsupported"
	codeOpQueryFailed        = "operation.query_failed"
	codeOpExecutionFailed    = "operation.execution_failed"
)

// remoteCommandPrefix is the reserved server-command clientId namespace
// (SPEC.md §1.5).
const remoteCommandPrefix = `["remote-command",`

func opError(code, message string) *syncerr.Error { return syncerr.New(code, message) }

// operationError maps a failure to the error an operation answers: a
// catalog error as it is, anything else as fallback (logged by the
// caller).
func operationError(err error, fallback string) *syncerr.Error {
	if pe := syncerr.As(err); pe != nil {
		return pe
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return syncerr.Wrap(fallback, "the operation was cancelled", err)
	}
	return syncerr.Wrap(fallback, "the operation failed", err)
}

// errorResponse renders an operation error.
func errorResponse(pe *syncerr.Error) *remotewire.ErrorResponse {
	return &remotewire.ErrorResponse{Code: pe.Code, Message: pe.Message, Retryable: pe.Entry().Retryable}
}

// checkCaller applies the clientId rules (REMOTE.md §1): the reserved
// namespace and a clientId bound to another actor are refused with
// sync.invalid_client_id.
func (s *Server) checkCaller(ctx context.Context, c Caller) error {
	if strings.HasPrefix(c.ClientID, remoteCommandPrefix) {
		return syncerr.New(syncerr.CodeInvalidClientID, "clientId uses the reserved server-command namespace")
	}
	if p := engine.IdentifierProblem(c.ClientID); p != "" {
		return syncerr.New(syncerr.CodeInvalidClientID, "clientId "+p)
	}
	rec, err := s.cfg.Store.Client(ctx, c.Partition, c.ClientID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil
	case err != nil:
		return err
	case rec.ActorID != c.ActorID:
		return syncerr.New(syncerr.CodeInvalidClientID, "clientId is bound to a different actor in this partition")
	}
	return nil
}

// resolveFor runs the scope resolver for an operation; a failure fails
// closed (operation.forbidden).
func (s *Server) resolveFor(ctx context.Context, c Caller) (map[string][]string, error) {
	allowed, err := s.cfg.ResolveScopes(ctx, ScopeRequest{Partition: c.Partition, ActorID: c.ActorID, ClientID: c.ClientID})
	if err != nil {
		s.cfg.Logger.WarnContext(ctx, "scope resolver failed; operation refused", "partition", c.Partition, "err", err)
		return nil, opError(codeOpForbidden, "scopes could not be resolved")
	}
	return allowed, nil
}

// runQuery authorizes and runs a registered query.
func (s *Server) runQuery(ctx context.Context, cq *compiledQuery, c Caller, rawParams any) (*remotewire.QueryResponse, error) {
	p, err := cq.decodeParams(rawParams)
	if err != nil {
		return nil, err
	}
	var allowed map[string][]string
	if cq.q.Coverage != nil {
		if allowed, err = s.resolveFor(ctx, c); err != nil {
			return nil, err
		}
	} else {
		ok, err := cq.q.Authorize(ctx, c, p)
		if err != nil {
			return nil, operationError(err, codeOpExecutionFailed)
		}
		if !ok {
			return nil, opError(codeOpForbidden, "the query is not authorized")
		}
	}
	rels, err := cq.relations(s.cfg.Schema, p, allowed)
	if err != nil {
		return nil, operationError(err, codeOpInvalidRequest)
	}
	reg := s.ops
	if reg.querier == nil {
		return nil, opError(codeOpStorageUnsupported, "the store does not run authoritative queries")
	}
	args := make(map[string]any, len(p))
	for k, v := range p {
		args[k] = v
	}
	composed, err := cq.stmt.Compose(cq.target, c.Partition, rels, args, cq.q.MaxRows+1)
	if err != nil {
		return nil, syncerr.Wrap(codeOpExecutionFailed, "the query could not be composed", err)
	}
	// The serve gate is read in the query's snapshot, as a pull's is: a
	// migration or a checkpoint cannot land between the gate and the rows.
	_, barrier := s.cfg.Store.(store.Barrier)
	res, err := reg.querier.RemoteQuery(ctx, c.Partition, store.RemoteStatement{SQL: composed.SQL, Args: composed.Args,
		ServeGate: barrier, Running: s.cfg.Schema.Version()})
	if err != nil {
		s.cfg.Logger.WarnContext(ctx, "registered query failed", "operation", cq.q.ID, "err", err)
		return nil, syncerr.Wrap(codeOpQueryFailed, "the registered query failed", err)
	}
	if res.Gate != nil {
		if err := s.eng.GateRefusal(*res.Gate); err != nil {
			return nil, err
		}
	}
	if len(res.Rows) > cq.q.MaxRows {
		return nil, opError(codeOpResultTooLarge, fmt.Sprintf("the result exceeds %d rows", cq.q.MaxRows))
	}
	rows, err := normalizeRows(cq.q.Columns, res)
	if err != nil {
		return nil, err
	}
	return &remotewire.QueryResponse{OperationID: cq.q.ID, Rows: rows, MaxCommitSeq: res.MaxCommitSeq}, nil
}

// normalizeRows keeps the declared columns, in declared order, with
// their values normalized to the declared types (REMOTE.md §2).
func normalizeRows(decl []ResultColumn, res store.RemoteResult) ([]remotewire.Object, error) {
	idx := make([]int, len(decl))
	for i, c := range decl {
		idx[i] = -1
		for j, name := range res.Columns {
			if name == c.Name {
				idx[i] = j
				break
			}
		}
		if idx[i] < 0 {
			return nil, opError(codeOpQueryFailed, "the query's result lacks the declared column "+c.Name)
		}
	}
	out := make([]remotewire.Object, len(res.Rows))
	for r, row := range res.Rows {
		obj := make(remotewire.Object, len(decl))
		for i, c := range decl {
			v, err := resultValue(c, row[idx[i]])
			if err != nil {
				return nil, opError(codeOpQueryFailed, fmt.Sprintf("column %s: %v", c.Name, err))
			}
			obj[i] = remotewire.Field{Key: c.Name, Value: v}
		}
		out[r] = obj
	}
	return out, nil
}

// resultValue normalizes one database value to a declared column type.
func resultValue(c ResultColumn, v any) (any, error) {
	if v == nil {
		if !c.Nullable {
			return nil, errors.New("null in a non-nullable column")
		}
		return nil, nil
	}
	switch c.Type {
	case wire.TypeInteger:
		n, ok := toInt(v)
		if !ok || n > maxSafe || n < -maxSafe {
			return nil, fmt.Errorf("%v is not a safe integer", v)
		}
		return float64(n), nil
	case wire.TypeFloat:
		switch x := v.(type) {
		case float64:
			if math.IsInf(x, 0) || math.IsNaN(x) {
				// REMOTE.md §4 has finite numbers only.
				return nil, fmt.Errorf("%v is not a finite number", x)
			}
			return x, nil
		case float32:
			if math.IsInf(float64(x), 0) || math.IsNaN(float64(x)) {
				return nil, fmt.Errorf("%v is not a finite number", x)
			}
			return float64(x), nil
		case string:
			f, err := strconv.ParseFloat(x, 64)
			if err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
				return f, nil
			}
		}
		if n, ok := toInt(v); ok {
			return float64(n), nil
		}
	case wire.TypeBoolean:
		switch x := v.(type) {
		case bool:
			return x, nil
		case float64:
			return x != 0, nil
		}
		if n, ok := toInt(v); ok {
			return n != 0, nil
		}
	case wire.TypeJSON:
		var text string
		switch x := v.(type) {
		case string:
			text = x
		case []byte:
			text = string(x)
		default:
			b, err := json.Marshal(x)
			if err != nil {
				return nil, err
			}
			text = string(b)
		}
		if !json.Valid([]byte(text)) {
			return nil, errors.New("not a JSON text")
		}
		return text, nil
	case wire.TypeBytes, wire.TypeCRDT:
		if b, ok := v.([]byte); ok {
			return b, nil
		}
	case wire.TypeString, wire.TypeBlobRef:
		if x, ok := v.(string); ok {
			return x, nil
		}
	}
	return nil, fmt.Errorf("a %T is not a %s value", v, c.Type)
}

func toInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case int32:
		return int64(x), true
	case int16:
		return int64(x), true
	case int8:
		return int64(x), true
	case int:
		return int64(x), true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case float64:
		if x == math.Trunc(x) && math.Abs(x) <= maxSafe {
			return int64(x), true
		}
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		return n, err == nil
	}
	return 0, false
}

// runCommand authorizes and applies a registered command.
func (s *Server) runCommand(ctx context.Context, cmd *Command, c Caller, requestID string, rawInput any) (*remotewire.CommandResponse, error) {
	if p := engine.IdentifierProblem(requestID); p != "" {
		return nil, opError(codeOpInvalidRequest, "requestId "+p)
	}
	input := toGo(rawInput)
	ok, err := cmd.Authorize(ctx, c, input)
	if err != nil {
		return nil, operationError(err, codeOpExecutionFailed)
	}
	if !ok {
		return nil, opError(codeOpForbidden, "the command is not authorized")
	}
	allowed, err := s.resolveFor(ctx, c)
	if err != nil {
		return nil, err
	}
	clientID, _ := wire.CanonicalJSON([]any{"remote-command", c.ActorID, c.ClientID})
	commitID, _ := wire.CanonicalJSON([]any{cmd.ID, requestID})
	if len(clientID) > MaxIdentifierBytes || len(commitID) > MaxIdentifierBytes {
		return nil, opError(codeOpInvalidRequest, fmt.Sprintf("the command's identity (actor, clientId, operationId, requestId) exceeds %d bytes", MaxIdentifierBytes))
	}
	cc := &CommandContext{Caller: c, OperationID: cmd.ID, RequestID: requestID, schema: s.cfg.Schema, allowed: allowed}
	out, err := s.eng.RunCommand(ctx, engine.Command{
		Auth:           engine.Auth{ActorID: c.ActorID, Partition: c.Partition},
		ClientID:       string(clientID),
		ClientCommitID: string(commitID),
		Allowed:        allowed,
		Build: func(ctx context.Context, tx store.WriteTx) ([]wire.Operation, error) {
			cc.tx = tx
			defer func() { cc.tx = nil }()
			muts, err := cmd.Run(ctx, cc, input)
			if err != nil {
				return nil, err
			}
			return commandOperations(s.cfg.Schema, muts)
		},
	})
	if err != nil {
		return nil, operationError(err, codeOpExecutionFailed)
	}
	resp := &remotewire.CommandResponse{OperationID: cmd.ID, RequestID: requestID, Status: out.Status.String(),
		CommitSeq: out.CommitSeq, Results: make([]any, len(out.Results))}
	for i, r := range out.Results {
		resp.Results[i] = opResultObject(r)
	}
	return resp, nil
}

// commandOperations turns a command's mutations into push operations
// (wire version 3: full sparse rows).
func commandOperations(sc *schema.Compiled, muts []Mutation) ([]wire.Operation, error) {
	if len(muts) == 0 {
		return nil, opError(codeOpInvalidRequest, "the command produced no mutations")
	}
	ops := make([]wire.Operation, len(muts))
	for i, m := range muts {
		t, ok := sc.Table(m.Table)
		if !ok {
			return nil, opError(codeOpInvalidRequest, fmt.Sprintf("mutation %d names an unknown table %q", i, m.Table))
		}
		if m.Delete {
			if m.RowID == "" {
				return nil, opError(codeOpInvalidRequest, fmt.Sprintf("mutation %d deletes an empty rowId", i))
			}
			ops[i] = wire.Operation{Table: t.Name(), RowID: m.RowID, Op: wire.OpDelete}
			continue
		}
		cols := t.Columns()
		for name := range m.Values {
			if _, ok := t.ColumnIndex(name); !ok {
				return nil, opError(codeOpInvalidRequest, fmt.Sprintf("mutation %d writes an unknown column %s.%s", i, m.Table, name))
			}
		}
		row := wire.SparseRow{Present: make([]bool, len(cols)), Values: make([]wire.Value, len(cols))}
		for c, col := range cols {
			v, ok := m.Values[col.Name]
			if !ok {
				return nil, opError(codeOpInvalidRequest, fmt.Sprintf("mutation %d lacks column %s.%s (an upsert writes a full row)", i, m.Table, col.Name))
			}
			wv, err := columnValue(col.Type, v)
			if err != nil {
				return nil, opError(codeOpInvalidRequest, fmt.Sprintf("mutation %d, column %s.%s: %v", i, m.Table, col.Name, err))
			}
			row.Present[c], row.Values[c] = true, wv
		}
		pk := t.PrimaryKey()
		rowID, ok := schema.RenderValue(cols[pk].Type, row.Values[pk])
		if !ok || row.Values[pk].Null {
			return nil, opError(codeOpInvalidRequest, fmt.Sprintf("mutation %d has no primary key", i))
		}
		payload, err := t.RowCodec().AppendSparse(nil, row)
		if err != nil {
			return nil, opError(codeOpInvalidRequest, fmt.Sprintf("mutation %d does not encode: %v", i, err))
		}
		ops[i] = wire.Operation{Table: t.Name(), RowID: rowID, Op: wire.OpUpsert, Payload: payload}
	}
	return ops, nil
}

// columnValue converts a Go value to a column value.
func columnValue(t wire.ColumnType, v any) (wire.Value, error) {
	if v == nil {
		return wire.Value{Null: true}, nil
	}
	switch t {
	case wire.TypeString, wire.TypeBlobRef:
		if s, ok := v.(string); ok {
			return wire.Value{Str: s}, nil
		}
	case wire.TypeJSON:
		switch x := v.(type) {
		case string:
			return wire.Value{Str: x}, nil
		case []byte:
			return wire.Value{Str: string(x)}, nil
		case json.RawMessage:
			return wire.Value{Str: string(x)}, nil
		}
		b, err := json.Marshal(v)
		if err != nil {
			return wire.Value{}, err
		}
		return wire.Value{Str: string(b)}, nil
	case wire.TypeInteger:
		if n, ok := toInt(v); ok {
			if _, isStr := v.(string); !isStr {
				return wire.Value{Int: n}, nil
			}
		}
		if u, ok := v.(uint64); ok && u <= math.MaxInt64 {
			return wire.Value{Int: int64(u)}, nil
		}
	case wire.TypeFloat:
		switch x := v.(type) {
		case float64:
			return wire.Value{Float: x}, nil
		case float32:
			return wire.Value{Float: float64(x)}, nil
		}
		if n, ok := toInt(v); ok {
			if _, isStr := v.(string); !isStr {
				return wire.Value{Float: float64(n)}, nil
			}
		}
	case wire.TypeBoolean:
		if b, ok := v.(bool); ok {
			return wire.Value{Bool: b}, nil
		}
	case wire.TypeBytes, wire.TypeCRDT:
		if b, ok := v.([]byte); ok {
			return wire.Value{Bytes: b}, nil
		}
	}
	return wire.Value{}, fmt.Errorf("a %T cannot be stored in a %s column", v, t)
}

// toGo converts a decoded remote value to the Go values an embedder
// sees: objects become map[string]any.
func toGo(v any) any {
	switch x := v.(type) {
	case remotewire.Object:
		m := make(map[string]any, len(x))
		for _, f := range x {
			m[f.Key] = toGo(f.Value)
		}
		return m
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = toGo(e)
		}
		return out
	}
	return v
}

// opResultObject renders a push operation result for a command response.
func opResultObject(r wire.OpResult) remotewire.Object {
	o := remotewire.Object{{Key: "opIndex", Value: int(r.OpIndex)}, {Key: "status", Value: r.Status.String()}}
	switch r.Status {
	case wire.OpConflict:
		o = append(o, remotewire.Field{Key: "code", Value: r.Code}, remotewire.Field{Key: "message", Value: r.Message},
			remotewire.Field{Key: "serverVersion", Value: float64(r.ServerVersion)},
			remotewire.Field{Key: "serverRow", Value: nonNil(r.ServerRow)},
			remotewire.Field{Key: "conflictColumns", Value: nonNil(r.ConflictColumns)})
	case wire.OpError:
		o = append(o, remotewire.Field{Key: "code", Value: r.Code}, remotewire.Field{Key: "message", Value: r.Message},
			remotewire.Field{Key: "retryable", Value: r.Retryable})
	}
	return o
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
