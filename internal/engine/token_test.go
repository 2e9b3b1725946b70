package engine

import (
	"testing"

	"github.com/syncgo/syncgo/store"
)

// A resume token resumes only when it has §4.7's shape whole; anything
// else restarts the bootstrap with a fresh pin (§4.7), never a resume at
// a field read as zero.
func TestParseToken(t *testing.T) {
	p := store.Partition{HorizonSeq: 2, MaxCommitSeq: 9}
	for _, tc := range []struct {
		raw    string
		resume bool
		cursor string // the row cursor of a resumed token; "-" for null
	}{
		{`{"asOfCommitSeq":4,"tables":["tasks"],"tableIndex":0,"rowCursor":"a1"}`, true, "a1"},
		{`{"asOfCommitSeq":4,"tables":["tasks"],"tableIndex":0,"rowCursor":null}`, true, "-"},
		{`{"rowCursor":"a1","tableIndex":0,"tables":["tasks"],"asOfCommitSeq":9}`, true, "a1"},
		{`{"tables":["tasks"],"rowCursor":"a1"}`, false, ""},
		{`{"asOfCommitSeq":4,"tables":["tasks"],"rowCursor":"a1"}`, false, ""},
		{`{"asOfCommitSeq":4,"tables":["tasks"],"tableIndex":0}`, false, ""},
		{`{"asOfCommitSeq":4,"tableIndex":0,"rowCursor":"a1"}`, false, ""},
		{`{"asOfCommitSeq":4,"tables":null,"tableIndex":0,"rowCursor":"a1"}`, false, ""},
		{`{"asOfCommitSeq":4,"tables":["tasks"],"tableIndex":0,"rowCursor":7}`, false, ""},
		{`{"asOfCommitSeq":"4","tables":["tasks"],"tableIndex":0,"rowCursor":"a1"}`, false, ""},
		{`{"asOfCommitSeq":4,"tables":["tasks"],"tableIndex":0,"rowCursor":"a1","extra":1}`, false, ""},
		{`{"asOfCommitSeq":4,"tables":["tasks"],"tableIndex":0,"rowCursor":"a1"} {}`, false, ""},
		{`{"asOfCommitSeq":1,"tables":["tasks"],"tableIndex":0,"rowCursor":"a1"}`, false, ""},  // below the horizon
		{`{"asOfCommitSeq":10,"tables":["tasks"],"tableIndex":0,"rowCursor":"a1"}`, false, ""}, // past the head
		{`{"asOfCommitSeq":4,"tables":["other"],"tableIndex":0,"rowCursor":"a1"}`, false, ""},
		{`{"asOfCommitSeq":4,"tables":["tasks"],"tableIndex":1,"rowCursor":"a1"}`, false, ""},
		{`not json`, false, ""},
	} {
		raw := tc.raw
		tok, ok := parseToken(&raw, "tasks", p)
		if ok != tc.resume {
			t.Errorf("%s: resume %v; want %v", raw, ok, tc.resume)
			continue
		}
		if !ok {
			continue
		}
		got := "-"
		if tok.RowCursor != nil {
			got = *tok.RowCursor
		}
		if got != tc.cursor {
			t.Errorf("%s: row cursor %s; want %s", raw, got, tc.cursor)
		}
	}
}

// Whatever a client sends as its resume token, parseToken does not panic,
// and a token it resumes has §4.7's shape within the partition's log.
func FuzzParseToken(f *testing.F) {
	f.Add(`{"asOfCommitSeq":4,"tables":["tasks"],"tableIndex":0,"rowCursor":"a1"}`)
	f.Add(`{"asOfCommitSeq":4,"tables":["tasks"],"tableIndex":0,"rowCursor":null}`)
	f.Add(`{"tables":["tasks"],"rowCursor":"a1"}`)
	f.Add(`{"asOfCommitSeq":1e3,"tables":["tasks"],"tableIndex":-0,"rowCursor":""}`)
	p := store.Partition{HorizonSeq: 2, MaxCommitSeq: 9}
	f.Fuzz(func(t *testing.T, raw string) {
		tok, ok := parseToken(&raw, "tasks", p)
		if !ok {
			return
		}
		if len(tok.Tables) != 1 || tok.Tables[0] != "tasks" || tok.TableIndex != 0 ||
			tok.AsOfCommitSeq < p.HorizonSeq || tok.AsOfCommitSeq > p.MaxCommitSeq {
			t.Fatalf("%q resumed as %+v", raw, tok)
		}
	})
}
