package storetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// The comparisons below treat a nil and an empty byte slice or list as
// equal: the contract's "nil" values may come back from a database as
// empty ones.

func sameScopes(a, b wire.StoredScopes) bool {
	return len(a) == len(b) && (len(a) == 0 || slices.Equal(a, b))
}

func sameRow(a, b store.Row) bool {
	return a.Table == b.Table && a.RowID == b.RowID && a.ServerVersion == b.ServerVersion &&
		sameScopes(a.Scopes, b.Scopes) && bytes.Equal(a.Payload, b.Payload) &&
		bytes.Equal(a.ColumnVersions, b.ColumnVersions)
}

func fmtScopes(s wire.StoredScopes) string {
	parts := make([]string, len(s))
	for i, e := range s {
		parts[i] = e.Key + "=" + e.Value
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func fmtRow(r store.Row) string {
	return fmt.Sprintf("{%s/%q v%d scopes=%s payload=%x cv=%x}",
		r.Table, r.RowID, r.ServerVersion, fmtScopes(r.Scopes), r.Payload, r.ColumnVersions)
}

func fmtRows(rows []store.Row) string {
	parts := make([]string, len(rows))
	for i, r := range rows {
		parts[i] = fmtRow(r)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func rowIDs(rows []store.Row) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.RowID
	}
	return out
}

func sameChange(a, b store.Change) bool {
	return a.Table == b.Table && a.RowID == b.RowID && a.Op == b.Op && a.RowVersion == b.RowVersion &&
		sameScopes(a.Scopes, b.Scopes) && bytes.Equal(a.Payload, b.Payload)
}

func fmtChange(c store.Change) string {
	return fmt.Sprintf("{%s %s/%q v%d scopes=%s payload=%x}", c.Op, c.Table, c.RowID, c.RowVersion, fmtScopes(c.Scopes), c.Payload)
}

func sameCommit(a, b store.Commit) bool {
	return a.Seq == b.Seq && a.CreatedAtMs == b.CreatedAtMs && a.ActorID == b.ActorID &&
		a.ClientID == b.ClientID && a.ClientCommitID == b.ClientCommitID &&
		slices.EqualFunc(a.Changes, b.Changes, sameChange)
}

func fmtCommit(c store.Commit) string {
	parts := make([]string, len(c.Changes))
	for i, ch := range c.Changes {
		parts[i] = fmtChange(ch)
	}
	return fmt.Sprintf("{seq=%d at=%d actor=%q client=%q/%q changes=[%s]}",
		c.Seq, c.CreatedAtMs, c.ActorID, c.ClientID, c.ClientCommitID, strings.Join(parts, " "))
}

func fmtCommits(cs []store.Commit) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = fmtCommit(c)
	}
	return "[" + strings.Join(parts, "\n  ") + "]"
}

// samePushRecord compares push records. Details compare as JSON values: a
// JSONB column (the reference server's Postgres layout) reorders members
// and reformats white space.
func samePushRecord(a, b store.PushRecord) bool {
	return a.Status == b.Status && a.CommitSeq == b.CommitSeq && a.RecordedAtMs == b.RecordedAtMs &&
		a.CacheIdentity == b.CacheIdentity &&
		slices.EqualFunc(a.Results, b.Results, sameOpResult) &&
		slices.EqualFunc(a.Details, b.Details, sameDetail)
}

func sameOpResult(a, b wire.OpResult) bool {
	return a.OpIndex == b.OpIndex && a.Status == b.Status && a.Code == b.Code && a.Message == b.Message &&
		a.ServerVersion == b.ServerVersion && bytes.Equal(a.ServerRow, b.ServerRow) &&
		(a.ConflictColumns == nil) == (b.ConflictColumns == nil) &&
		bytes.Equal(a.ConflictColumns, b.ConflictColumns) && a.Retryable == b.Retryable
}

func sameDetail(a, b wire.DetailEntry) bool {
	if a.OpIndex != b.OpIndex {
		return false
	}
	var va, vb any
	if json.Unmarshal([]byte(a.DetailsJSON), &va) != nil || json.Unmarshal([]byte(b.DetailsJSON), &vb) != nil {
		return a.DetailsJSON == b.DetailsJSON
	}
	return reflect.DeepEqual(va, vb)
}

func fmtPushRecord(r store.PushRecord) string {
	var b strings.Builder
	fmt.Fprintf(&b, "{%s seq=%d at=%d cache=%q results=[", r.Status, r.CommitSeq, r.RecordedAtMs, r.CacheIdentity)
	for i, o := range r.Results {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "{%d %s %q %q v%d row=%x cols=%x retry=%t}",
			o.OpIndex, o.Status, o.Code, o.Message, o.ServerVersion, o.ServerRow, o.ConflictColumns, o.Retryable)
	}
	b.WriteString("] details=[")
	for i, d := range r.Details {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "{%d %s}", d.OpIndex, d.DetailsJSON)
	}
	b.WriteString("]}")
	return b.String()
}

func sameClient(a, b store.ClientRecord) bool {
	return a.ClientID == b.ClientID && a.ActorID == b.ActorID && a.WireVersion == b.WireVersion &&
		a.Cursor == b.Cursor && a.UpdatedAtMs == b.UpdatedAtMs &&
		slices.EqualFunc(a.Subscriptions, b.Subscriptions, sameSubscription)
}

func sameSubscription(a, b store.SubscriptionRecord) bool {
	if a.ID != b.ID || a.Table != b.Table || len(a.Scopes) != len(b.Scopes) {
		return false
	}
	for k, va := range a.Scopes {
		vb, ok := b.Scopes[k]
		if !ok || len(va) != len(vb) || (len(va) > 0 && !slices.Equal(va, vb)) {
			return false
		}
	}
	return true
}

func fmtClient(c store.ClientRecord) string {
	return fmt.Sprintf("%+v", c)
}
