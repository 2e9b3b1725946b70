package engine

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// MaxIdentifierBytes bounds, in UTF-8 bytes, every identifier the server
// stores in an index: actor ids and partitions (from authentication),
// client ids, client commit ids, row ids and scope values. The bound keeps
// the widest composite key (partition, table, variable, value, row id)
// well under the Postgres B-tree entry limit (about 2.7 KB), so that an
// input one driver can store is stored by both.
const MaxIdentifierBytes = 512

// IdentifierProblem returns why s cannot be an identifier the server
// stores and sends back, or "" when it can: an identifier is non-empty,
// well-formed UTF-8 (the wire's str), holds no NUL character (Postgres
// text cannot) and is at most MaxIdentifierBytes long.
func IdentifierProblem(s string) string {
	if s == "" {
		return "is empty"
	}
	return textProblem(s, MaxIdentifierBytes)
}

// textProblem is IdentifierProblem without the emptiness rule; max < 0
// means no length bound.
func textProblem(s string, max int) string {
	switch {
	case max >= 0 && len(s) > max:
		return fmt.Sprintf("is %d bytes long, over the %d-byte limit", len(s), max)
	case !utf8.ValidString(s):
		return "is not well-formed UTF-8"
	case strings.IndexByte(s, 0) >= 0:
		return "contains a NUL character"
	}
	return ""
}

// jsonProblem returns why a JSON document cannot be stored by every
// driver: a NUL character, raw or as a \u0000 escape (Postgres JSONB
// refuses both), or "".
func jsonProblem(doc string) string {
	if p := textProblem(doc, -1); p != "" {
		return p
	}
	for i := 0; i < len(doc); i++ {
		if doc[i] != '\\' || i+1 >= len(doc) {
			continue
		}
		if doc[i+1] == 'u' && i+6 <= len(doc) && doc[i+2:i+6] == "0000" {
			return `contains a \u0000 escape`
		}
		i++ // skip the escaped character (a backslash escapes the next one)
	}
	return ""
}

// checkRequestInput refuses, as request validation (§1.7), the request
// fields that no driver could store the same way: the client id
// (sync.invalid_client_id: the client starts again under a fresh one),
// client commit ids (sync.invalid_request, like an empty one), and the
// subscriptions' ids and requested scope values, which the client record
// stores and the pulls query with (sync.invalid_subscription). Decoding already guarantees
// well-formed UTF-8; this adds NUL characters and length bounds.
func checkRequestInput(req *wire.Request) error {
	if p := IdentifierProblem(req.Header.ClientID); p != "" {
		return syncerr.New(syncerr.CodeInvalidClientID, "clientId "+p)
	}
	for _, c := range req.Commits {
		if p := IdentifierProblem(c.ClientCommitID); p != "" {
			return syncerr.New(syncerr.CodeInvalidRequest, "clientCommitId "+p)
		}
	}
	for _, sub := range req.Subscriptions {
		if p := IdentifierProblem(sub.ID); p != "" {
			return syncerr.New(syncerr.CodeInvalidSubscription, "a subscription id "+p)
		}
		for _, sc := range sub.Scopes {
			for _, v := range sc.Values {
				if p := textProblem(v, MaxIdentifierBytes); p != "" {
					return syncerr.New(syncerr.CodeInvalidSubscription, "a requested scope value "+p)
				}
			}
		}
	}
	return nil
}

// valueProblem checks an operation's decoded row values (§6.1): text and
// JSON without NUL, scope column values within MaxIdentifierBytes. It
// returns the problem, or "". Values too long for a declared index are
// indexProblem's.
func valueProblem(t *schema.CompiledTable, in wire.SparseRow) string {
	cols := t.Columns()
	for i, v := range in.Values {
		if i >= len(cols) || (i < len(in.Present) && !in.Present[i]) || v.Null {
			continue
		}
		var p string
		switch cols[i].Type {
		case wire.TypeString:
			p = textProblem(v.Str, -1)
		case wire.TypeJSON, wire.TypeBlobRef:
			p = jsonProblem(v.Str)
		}
		if p != "" {
			return "column " + cols[i].Name + " " + p
		}
	}
	for _, ix := range t.Indexes() {
		if p := indexProblem(t, ix, in); p != "" {
			return p
		}
	}
	for _, variable := range t.Variables() {
		i, ok := t.VariableColumn(variable)
		if !ok || i >= len(in.Values) || (i < len(in.Present) && !in.Present[i]) || in.Values[i].Null {
			continue
		}
		// A scope value is the column's string form: the text of a
		// string, json or blob_ref value (integers and booleans are short).
		if len(in.Values[i].Str) > MaxIdentifierBytes {
			return fmt.Sprintf("scope column %s is %d bytes long, over the %d-byte limit", cols[i].Name, len(in.Values[i].Str), MaxIdentifierBytes)
		}
	}
	return ""
}

// WireActorID is the actor id a COMMIT frame carries for a stored commit.
// Authentication refuses actor ids that are not well-formed UTF-8, but a
// database written before that check (or by another server) may hold
// one; the wire's str cannot carry it, and failing the frame would fail
// every pull whose window holds the commit, forever. Such an id is sent
// with each run of invalid bytes replaced by U+FFFD: the actor id is informative
// to clients (§4.5), the changes are delivered intact.
func WireActorID(actorID string) string {
	if utf8.ValidString(actorID) {
		return actorID
	}
	return strings.ToValidUTF8(actorID, "\uFFFD")
}

// maxIndexedValuesBytes is the room a declared index entry (partition,
// columns…) leaves for its variable-length column values: the Postgres
// B-tree entry limit (about 2.7 KB) minus a partition of
// MaxIdentifierBytes and the headers, rounded down.
const maxIndexedValuesBytes = 2048 - MaxIdentifierBytes

// indexProblem returns why a row's values cannot be stored in a declared
// index by every driver, or "": each variable-length value of the index
// gets an equal share of maxIndexedValuesBytes, so that an update of one
// column can never push an entry over the limit.
func indexProblem(t *schema.CompiledTable, ix schema.CompiledIndex, in wire.SparseRow) string {
	cols := t.Columns()
	var idx []int
	for _, name := range ix.Columns {
		if i, ok := t.ColumnIndex(name); ok && variableLength(cols[i].Type) {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return ""
	}
	share := maxIndexedValuesBytes / len(idx)
	for _, i := range idx {
		if i >= len(in.Values) || (i < len(in.Present) && !in.Present[i]) || in.Values[i].Null {
			continue
		}
		v := in.Values[i]
		if n := len(v.Str) + len(v.Bytes); n > share {
			return fmt.Sprintf("column %s is %d bytes long, over the %d bytes index %s allows it", cols[i].Name, n, share, ix.Name)
		}
	}
	return ""
}

func variableLength(t wire.ColumnType) bool {
	switch t {
	case wire.TypeString, wire.TypeJSON, wire.TypeBlobRef, wire.TypeBytes, wire.TypeCRDT:
		return true
	}
	return false
}
