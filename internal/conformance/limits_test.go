package conformance

import (
	"encoding/json"
	"testing"

	"github.com/syncgo/syncgo"
)

// An absent limit takes the server default; an explicit inlineSegmentMaxBytes
// of 0 means "never inline"; an explicit 0 elsewhere is refused.
func TestCreateLimitsTellAbsentFromZero(t *testing.T) {
	t.Parallel()
	parse := func(s string) (syncgo.Limits, error) {
		t.Helper()
		var req struct {
			Limits *createLimits `json:"limits"`
		}
		if err := json.Unmarshal([]byte(s), &req); err != nil {
			t.Fatal(err)
		}
		l, _, err := req.Limits.serverLimits()
		return l, err
	}
	for _, tc := range []struct {
		body   string
		inline int
	}{
		{`{}`, 0},
		{`{"limits":{}}`, 0},
		{`{"limits":{"maxOperationsPerRequest":2}}`, 0},
		{`{"limits":{"inlineSegmentMaxBytes":0}}`, syncgo.NeverInline},
		{`{"limits":{"inlineSegmentMaxBytes":1}}`, 1},
	} {
		l, err := parse(tc.body)
		if err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		if l.InlineSegmentMaxBytes != tc.inline {
			t.Errorf("%s: InlineSegmentMaxBytes %d, want %d", tc.body, l.InlineSegmentMaxBytes, tc.inline)
		}
	}
	for _, bad := range []string{
		`{"limits":{"inlineSegmentMaxBytes":-1}}`,
		`{"limits":{"maxOperationsPerRequest":0}}`,
		`{"limits":{"segmentTtlMs":0}}`,
	} {
		if _, err := parse(bad); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}
