package validate

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestRowRules(t *testing.T) {
	ctx := context.Background()
	max := 3
	v, err := RowRule{Kind: "maxLength", Column: "title", Max: &max, Code: "app.too_long"}.Compile()
	if err != nil {
		t.Fatal(err)
	}
	if err := v(ctx, &Write{Operation: Operation{Row: Row{"title": "abc"}}}); err != nil {
		t.Fatalf("3 characters: %v", err)
	}
	var rej *Rejection
	if err := v(ctx, &Write{Operation: Operation{Row: Row{"title": "abcd"}}}); !errors.As(err, &rej) || rej.Code() != "app.too_long" {
		t.Fatalf("4 characters: %v", err)
	}
	// UTF-16 code units: one astral character counts two.
	if err := v(ctx, &Write{Operation: Operation{Row: Row{"title": "a😀"}}}); err != nil {
		t.Fatalf("a + astral = 3 units: %v", err)
	}
	if err := v(ctx, &Write{Operation: Operation{Row: Row{"title": "ab😀"}}}); err == nil {
		t.Fatal("ab + astral = 4 units accepted")
	}

	im, err := RowRule{Kind: "immutableWhen", Column: "title", GuardColumn: "done", GuardValue: true, Code: "app.locked"}.Compile()
	if err != nil {
		t.Fatal(err)
	}
	stored := Row{"title": "x", "done": true}
	if err := im(ctx, &Write{Operation: Operation{Row: Row{"title": "y", "done": true}, Stored: stored}}); !errors.As(err, &rej) || rej.Code() != "app.locked" {
		t.Fatalf("a change under the guard: %v", err)
	}
	if err := im(ctx, &Write{Operation: Operation{Row: Row{"title": "x", "done": false}, Stored: stored}}); err != nil {
		t.Fatalf("the column unchanged: %v", err)
	}
	if err := im(ctx, &Write{Operation: Operation{Row: Row{"title": "y"}, Stored: Row{"title": "x", "done": false}}}); err != nil {
		t.Fatalf("the guard not met: %v", err)
	}

	for _, bad := range []RowRule{
		{Kind: "maxLength", Column: "title", Code: "app.x"},
		{Kind: "maxLength", Max: &max, Code: "app.x"},
		{Kind: "maxLength", Column: "t", Max: &max, Code: "sync.reserved"},
		{Kind: "immutableWhen", Column: "t", Code: "app.x"},
		{Kind: "immutableWhen", Column: "t", GuardColumn: "g", GuardValue: []int{1}, Code: "app.x"},
		{Kind: "nope"},
		{},
	} {
		if _, err := bad.Compile(); err == nil {
			t.Errorf("%+v compiled", bad)
		}
	}
}

func TestCommitRuleAndChains(t *testing.T) {
	ctx := context.Background()
	v, err := CommitRule{Kind: "requireSiblingWhen", Table: "orders", Column: "status", Equals: "paid",
		SiblingRowIDSuffix: "-receipt", Code: "app.no_receipt"}.Compile()
	if err != nil {
		t.Fatal(err)
	}
	paid := Operation{OpIndex: 1, Table: "orders", RowID: "o1", Row: Row{"status": "paid"}}
	var rej *Rejection
	if err := v(ctx, &Commit{Operations: []Operation{{Table: "orders", RowID: "o0", Row: Row{"status": "new"}}, paid}}); !errors.As(err, &rej) {
		t.Fatalf("paid without its receipt: %v", err)
	} else if i, ok := rej.OpIndex(); !ok || i != 1 {
		t.Fatalf("the rejection names op %d (%v), want 1", i, ok)
	}
	if err := v(ctx, &Commit{Operations: []Operation{paid, {Table: "orders", RowID: "o1-receipt", Row: Row{}}}}); err != nil {
		t.Fatalf("with its receipt: %v", err)
	}
	if _, err := (CommitRule{Kind: "requireSiblingWhen", Table: "orders"}).Compile(); err == nil {
		t.Fatal("a rule without column compiled")
	}

	first := errors.New("first")
	calls := 0
	chain := Chain(func(context.Context, *Write) error { calls++; return nil },
		func(context.Context, *Write) error { calls++; return first },
		func(context.Context, *Write) error { calls++; return nil })
	if err := chain(ctx, &Write{}); err != first || calls != 2 {
		t.Fatalf("chain: %v after %d calls", err, calls)
	}
}

func TestRuleValue(t *testing.T) {
	for in, want := range map[any]any{int(3): int64(3), int64(4): int64(4), 2.5: 2.5, "s": "s", true: true} {
		if got, err := RuleValue(in); err != nil || got != want {
			t.Errorf("RuleValue(%v) = %v, %v", in, got, err)
		}
	}
	b, err := RuleValue(map[string]any{"$bytes": "0aff"})
	if err != nil || string(b.([]byte)) != "\x0a\xff" {
		t.Fatalf("$bytes: %v %v", b, err)
	}
	if _, err := RuleValue(map[string]any{"x": 1}); err == nil || !strings.Contains(err.Error(), "$bytes") {
		t.Fatalf("an object: %v", err)
	}
	if !SameValue(int64(2), 2.0) || SameValue([]byte("a"), "a") || !SameValue([]byte("a"), []byte("a")) {
		t.Fatal("SameValue")
	}
}
