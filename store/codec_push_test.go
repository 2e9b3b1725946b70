package store

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/syncgo/syncgo/wire"
)

// FuzzEncodePushRecord: the reflection-free encodings (appendJSONString,
// appendAppliedRecord) write what encoding/json writes, for any strings
// and numbers, and the record decodes back.
func FuzzEncodePushRecord(f *testing.F) {
	f.Add("epoch-1", "alice", int64(7), int64(1700000000000), int32(0), uint8(1))
	f.Add("", "", int64(0), int64(0), int32(3), uint8(0))
	f.Add("<a&b>", "é\u2028\"\\", int64(-1), int64(-5), int32(-2), uint8(3))
	f.Add("\x00\x7f\xff", "tab\there", int64(1<<62), int64(1), int32(1<<30), uint8(2))
	f.Fuzz(func(t *testing.T, cache, actor string, seq, at int64, opIndex int32, n uint8) {
		for _, s := range []string{cache, actor} {
			want, _ := json.Marshal(s)
			if got := appendJSONString(nil, s); !bytes.Equal(got, want) {
				t.Fatalf("appendJSONString(%q) = %s, encoding/json %s", s, got, want)
			}
		}
		rec := PushRecord{Status: wire.PushApplied, CommitSeq: seq, RecordedAtMs: at, CacheIdentity: cache, ActorID: actor}
		for i := range int32(n % 4) {
			rec.Results = append(rec.Results, wire.OpResult{OpIndex: opIndex + i, Status: wire.OpApplied})
		}
		got := encodedAsMarshal(t, rec)
		if _, err := DecodePushRecord(got); err != nil {
			t.Fatalf("DecodePushRecord(%s): %v", got, err)
		}
	})
}

// TestEncodePushRecordPaths: the applied records take the fast path, the
// others encoding/json, and both write the same bytes as encoding/json.
func TestEncodePushRecordPaths(t *testing.T) {
	applied := PushRecord{Status: wire.PushApplied, CommitSeq: 9, RecordedAtMs: 5, CacheIdentity: "c", ActorID: "a",
		Results: []wire.OpResult{{OpIndex: 0, Status: wire.OpApplied}, {OpIndex: 1, Status: wire.OpApplied}}}
	if _, ok := appendAppliedRecord(nil, applied); !ok {
		t.Errorf("an applied record is not on the fast path")
	}
	others := []PushRecord{
		{Status: wire.PushRejected, Results: []wire.OpResult{{OpIndex: 0, Status: wire.OpError, Code: "x", Message: "no"}}},
		{Status: wire.PushApplied, CommitSeq: 3, Results: []wire.OpResult{{OpIndex: 0, Status: wire.OpConflict, Code: "c",
			ServerVersion: 2, ServerRow: []byte{1, 2}}}},
		{Status: wire.PushRejected, Results: []wire.OpResult{{OpIndex: 0, Status: wire.OpError, Code: "x"}},
			Details: []wire.DetailEntry{{OpIndex: 0, DetailsJSON: `{"a":1}`}}},
	}
	for _, rec := range others {
		if _, ok := appendAppliedRecord(nil, rec); ok {
			t.Errorf("%+v: taken by the fast path", rec)
		}
	}
	for _, rec := range append(others, applied, PushRecord{Status: wire.PushApplied}) {
		encodedAsMarshal(t, rec)
	}
}

// encodedAsMarshal returns EncodePushRecord's bytes for rec and fails the
// test unless they are encoding/json's.
func encodedAsMarshal(t *testing.T, rec PushRecord) []byte {
	t.Helper()
	got, err := EncodePushRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	want, err := marshalPushRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("EncodePushRecord = %s, encoding/json %s", got, want)
	}
	return got
}

// BenchmarkEncodePushRecord: an applied one-operation commit's record,
// by the fast path and by encoding/json.
func BenchmarkEncodePushRecord(b *testing.B) {
	rec := PushRecord{Status: wire.PushApplied, CommitSeq: 123456, RecordedAtMs: 1764806400000,
		CacheIdentity: "k2v8q0x1m3n5", ActorID: "bench-17", Results: []wire.OpResult{{OpIndex: 0, Status: wire.OpApplied}}}
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := EncodePushRecord(rec); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := marshalPushRecord(rec); err != nil {
				b.Fatal(err)
			}
		}
	})
}
