package pgstore

import (
	"strconv"
	"strings"
	"testing"

	"github.com/syncgo/syncgo/store"
)

// commitPayload is the payload sqlNotifyCommit builds for a commit, in Go.
func commitPayload(seq int64, schema, partition string) string {
	msg := strconv.FormatInt(seq, 10) + ":" + schema + ":" + partition
	if len(msg) > maxNotifyPayload {
		return strconv.FormatInt(seq, 10) + ":" + schema
	}
	return msg
}

// Every notification round-trips: a listener of the schema reads back
// the commit (or the grants) that was announced, or a full check when the
// ids did not fit; a listener of another schema (no ':' in either name,
// see listen.go) reads nothing of it; and whatever payload a listener
// keeps, announcing what it read again reads the same.
func FuzzParseNotification(f *testing.F) {
	f.Add(int64(12), "s", "t", "p", "alice", "12:s:p")
	f.Add(int64(1), "public", "public2", "a:b:", "", "grants:s:3:a:bc:d")
	f.Add(int64(7), "s", "grants", "", "c:d", "grants:s")
	f.Add(int64(99), "x", "x_", strings.Repeat("é", 4000), "bob", "0:s:p")
	f.Fuzz(func(t *testing.T, seq int64, schema, other, partition, actor, payload string) {
		if schema == "" || strings.Contains(schema, ":") {
			return
		}
		if seq > 0 {
			p := commitPayload(seq, schema, partition)
			want := store.CommitNotification{Partition: partition, Seq: seq}
			if !strings.HasSuffix(p, ":"+partition) || len(p) > maxNotifyPayload {
				want = store.CommitNotification{Reconnected: true}
			}
			if got, ok := parseNotification(p, schema); !ok || got != want {
				t.Fatalf("commit %d of %q in %q: payload %.80q read as %+v, %v; want %+v", seq, partition, schema, p, got, ok, want)
			}
			if other != "" && other != schema && !strings.Contains(other, ":") {
				if got, ok := parseNotification(p, other); ok {
					t.Fatalf("schema %q read %+v from %q's payload %.80q", other, got, schema, p)
				}
			}
		}
		p := grantsPayload(schema, partition, actor)
		want := store.CommitNotification{Grants: true, Partition: partition, ActorID: actor}
		if p == grantsPrefix+schema {
			want = store.CommitNotification{Grants: true}
		}
		if len(p) > maxNotifyPayload {
			t.Fatalf("grants payload of %d bytes", len(p))
		}
		if got, ok := parseNotification(p, schema); !ok || got != want {
			t.Fatalf("grants of %q/%q in %q: payload %.80q read as %+v, %v; want %+v", partition, actor, schema, p, got, ok, want)
		}
		if other != "" && other != schema && !strings.Contains(other, ":") {
			if got, ok := parseNotification(p, other); ok {
				t.Fatalf("schema %q read %+v from %q's payload %.80q", other, got, schema, p)
			}
		}

		got, ok := parseNotification(payload, schema)
		if !ok {
			return
		}
		var again string
		switch {
		case got.Grants && got.Partition == "" && got.ActorID == "":
			again = grantsPrefix + schema
		case got.Grants:
			again = grantsPayload(schema, got.Partition, got.ActorID)
		case got.Reconnected:
			if got.Partition != "" || got.Seq != 0 {
				t.Fatalf("%q: a full check that names %+v", payload, got)
			}
			return
		default:
			if got.Seq <= 0 {
				t.Fatalf("%q: commit sequence %d", payload, got.Seq)
			}
			again = commitPayload(got.Seq, schema, got.Partition)
		}
		if back, ok := parseNotification(again, schema); !ok || (back != got && !(back.Grants && back.Partition == "" && back.ActorID == "")) {
			t.Fatalf("%q read as %+v; announced again as %q, read as %+v, %v", payload, got, again, back, ok)
		}
	})
}
