package validate

import (
	"strings"
	"testing"
)

func TestRejectChecksItsInputWhereItIsBuilt(t *testing.T) {
	for _, tc := range []struct {
		name    string
		code    string
		message string
		details *Details
	}{
		{"empty code", "", "m", nil},
		{"sync prefix", "sync.mine", "m", nil},
		{"blob prefix", "blob.gone", "m", nil},
		{"operation prefix", "operation.x", "m", nil},
		{"presence prefix", "presence.x", "m", nil},
		{"client prefix", "client.x", "m", nil},
		{"space in code", "app bad", "m", nil},
		{"long code", strings.Repeat("a", MaxCodeBytes+1), "m", nil},
		{"invalid UTF-8 message", "app.x", "\xff", nil},
		{"long message", "app.x", strings.Repeat("m", MaxMessageBytes+1), nil},
		{"empty details", "app.x", "m", &Details{}},
		{"bad reason token", "app.x", "m", &Details{Reason: "Not A Token"}},
		{"bad field path", "app.x", "m", &Details{FieldPaths: []string{"a..b"}}},
		{"unsafe reference", "app.x", "m", &Details{References: map[string]string{"row": " padded"}}},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: Reject did not panic", tc.name)
				}
			}()
			Reject(tc.code, tc.message, tc.details)
		}()
	}
}

func TestRejectNormalizesDetails(t *testing.T) {
	r := Reject("app.full", "full", &Details{References: map[string]string{"z": "1", "a": "2"}, Reason: "full",
		FieldPaths: []string{"list_id"}, RequiredAction: "close_a_task"})
	want := `{"fieldPaths":["list_id"],"reason":"full","requiredAction":"close_a_task","references":{"a":"2","z":"1"}}`
	if r.DetailsJSON() != want {
		t.Errorf("details %s, want %s", r.DetailsJSON(), want)
	}
	if _, named := r.OpIndex(); named {
		t.Error("a fresh rejection names an operation")
	}
	at := r.AtOp(3)
	if i, named := at.OpIndex(); !named || i != 3 {
		t.Errorf("AtOp(3).OpIndex() = %d, %v", i, named)
	}
	if _, named := r.OpIndex(); named {
		t.Error("AtOp changed the original")
	}
	if r.Code() != "app.full" || r.Message() != "full" || !strings.Contains(r.Error(), "app.full") {
		t.Errorf("accessors: %q %q %q", r.Code(), r.Message(), r.Error())
	}
	if Reject("app.x", "m", nil).DetailsJSON() != "" {
		t.Error("no details should be empty")
	}
}
