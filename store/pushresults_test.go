package store

import "testing"

// PushRecordedAt reads recordedAtMs from the object form and from a JSON
// string holding it (the reference's form on Postgres); a record without
// one, with zero, with a value that is not a number, or that does not
// decode has no recorded time.
func TestPushRecordedAt(t *testing.T) {
	for _, tt := range []struct {
		doc  string
		want int64
		ok   bool
	}{
		{`{"status":"applied","commitSeq":1,"recordedAtMs":1700000000000,"results":[]}`, 1700000000000, true},
		{` {"recordedAtMs": 1.7e12}`, 1700000000000, true},
		{`"{\"status\":\"applied\",\"recordedAtMs\":42,\"results\":[]}"`, 42, true},
		{`{"status":"applied","commitSeq":1,"results":[{"opIndex":0,"status":"applied"}]}`, 0, false},
		{`{"recordedAtMs":0}`, 0, false},
		{`{"recordedAtMs":null}`, 0, false},
		{`{"recordedAtMs":"1000"}`, 0, false},
		{`{"recordedAtMs":-5}`, 0, false},
		{`not json`, 0, false},
		{`"not json either"`, 0, false},
		{``, 0, false},
	} {
		if got, ok := PushRecordedAt([]byte(tt.doc)); got != tt.want || ok != tt.ok {
			t.Errorf("PushRecordedAt(%s) = %d, %v; want %d, %v", tt.doc, got, ok, tt.want, tt.ok)
		}
	}
}

// FuzzPushResultsPosition: a stored prune position's name decodes
// without panicking, and only into a key that encodes back to the same
// name; every key round-trips.
func FuzzPushResultsPosition(f *testing.F) {
	f.Add(PushResultsPositionName, "p", "c", "k")
	f.Add(PushResultsPositionName+":1:p1:c1:k", "", ":", "1:")
	f.Add(PushResultsPositionName+":01:p1:c1:k", "a\x00b", "é", "")
	f.Add(PushResultsPositionName+":9:p", "x", "y", "z")
	f.Fuzz(func(t *testing.T, name, partition, client, commit string) {
		if after, ok := DecodePushResultsPosition(name); ok {
			if got := EncodePushResultsPosition(after); got != name {
				t.Fatalf("%q decodes to %+v, which encodes to %q", name, after, got)
			}
		}
		key := &PushResultKey{Partition: partition, ClientID: client, ClientCommitID: commit}
		after, ok := DecodePushResultsPosition(EncodePushResultsPosition(key))
		if !ok || after == nil || *after != *key {
			t.Fatalf("%+v round-trips to %+v, %v", key, after, ok)
		}
	})
}
