package conformance

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"unicode/utf16"

	"github.com/syncgo/syncgo/validate"
)

// The write rules of conformance mode (installValidators,
// installCommitValidator): the catalog's declarative rule kinds, compiled
// into the real Go callbacks (validate.Validator, validate.CommitValidator)
// the server runs for an embedder. An instance's server is built with a
// dispatcher per table and one for commits, which run the rules installed
// at the time of the push.

// validatorSpec is one element of installValidators' argument.
type validatorSpec struct {
	Table string   `json:"table"`
	Rule  ruleSpec `json:"rule"`
}

// ruleSpec is a row rule: kind maxLength, immutableWhen or
// unexpectedError.
type ruleSpec struct {
	Kind        string          `json:"kind"`
	Column      string          `json:"column"`
	Max         *int            `json:"max"`
	GuardColumn string          `json:"guardColumn"`
	GuardValue  json.RawMessage `json:"guardValue"`
	Code        string          `json:"code"`
	Message     string          `json:"message"`
}

// commitRuleSpec is installCommitValidator's argument: kind
// requireSiblingWhen.
type commitRuleSpec struct {
	Kind               string          `json:"kind"`
	Table              string          `json:"table"`
	Column             string          `json:"column"`
	Equals             json.RawMessage `json:"equals"`
	SiblingRowIDSuffix string          `json:"siblingRowIdSuffix"`
	Code               string          `json:"code"`
}

// rules holds an instance's installed rules.
type rules struct {
	mu     sync.Mutex
	row    map[string]validate.Validator
	commit validate.CommitValidator
}

// validators returns the dispatchers the instance's server is built with.
func (r *rules) validators(tables []string) map[string]validate.Validator {
	out := make(map[string]validate.Validator, len(tables))
	for _, table := range tables {
		out[table] = func(ctx context.Context, w *validate.Write) error {
			r.mu.Lock()
			v := r.row[table]
			r.mu.Unlock()
			if v == nil {
				return nil
			}
			return v(ctx, w)
		}
	}
	return out
}

func (r *rules) commitValidator(ctx context.Context, c *validate.Commit) error {
	r.mu.Lock()
	v := r.commit
	r.mu.Unlock()
	if v == nil {
		return nil
	}
	return v(ctx, c)
}

func callInstallValidators(_ context.Context, in *instance, args []json.RawMessage) (any, error) {
	var specs []validatorSpec
	if err := arg(args, 0, "validators", &specs); err != nil {
		return nil, err
	}
	row := map[string]validate.Validator{}
	for i, s := range specs {
		if _, ok := in.schema.Table(s.Table); !ok {
			return nil, badArgs("validator %d: unknown table %q", i, s.Table)
		}
		v, err := compileRule(s.Rule)
		if err != nil {
			return nil, badArgs("validator %d: %v", i, err)
		}
		row[s.Table] = v
	}
	in.rules.mu.Lock()
	in.rules.row = row
	in.rules.mu.Unlock()
	return nil, nil
}

func callInstallCommitValidator(_ context.Context, in *instance, args []json.RawMessage) (any, error) {
	var v validate.CommitValidator
	if hasArg(args, 0) {
		var s commitRuleSpec
		if err := arg(args, 0, "commit validator", &s); err != nil {
			return nil, err
		}
		var err error
		if v, err = compileCommitRule(s); err != nil {
			return nil, badArgs("commit validator: %v", err)
		}
	}
	in.rules.mu.Lock()
	in.rules.commit = v
	in.rules.mu.Unlock()
	return nil, nil
}

func compileRule(s ruleSpec) (validate.Validator, error) {
	switch s.Kind {
	case "unexpectedError":
		msg := s.Message
		return func(context.Context, *validate.Write) error { return errors.New(msg) }, nil
	case "maxLength":
		if s.Column == "" || s.Max == nil || *s.Max < 0 {
			return nil, errors.New("maxLength needs column and a non-negative max")
		}
		if err := validate.CheckCode(s.Code); err != nil {
			return nil, err
		}
		max := *s.Max
		return func(_ context.Context, w *validate.Write) error {
			if w.Row == nil {
				return nil // a delete carries no row
			}
			if v, ok := w.Row[s.Column].(string); ok && utf16Len(v) > max {
				return validate.Reject(s.Code, fmt.Sprintf("%s exceeds %d characters", s.Column, max),
					&validate.Details{FieldPaths: []string{s.Column}, Reason: "max_length_exceeded", RequiredAction: "edit_fields"})
			}
			return nil
		}, nil
	case "immutableWhen":
		if s.Column == "" || s.GuardColumn == "" {
			return nil, errors.New("immutableWhen needs column and guardColumn")
		}
		if err := validate.CheckCode(s.Code); err != nil {
			return nil, err
		}
		guard, err := driverValue(s.GuardValue)
		if err != nil {
			return nil, fmt.Errorf("guardValue: %w", err)
		}
		return func(_ context.Context, w *validate.Write) error {
			if w.Row == nil || w.Stored == nil {
				return nil // an insert or a delete
			}
			if !sameValue(w.Stored[s.GuardColumn], guard) || sameValue(w.Row[s.Column], w.Stored[s.Column]) {
				return nil
			}
			return validate.Reject(s.Code, fmt.Sprintf("%s is immutable in this state", s.Column),
				&validate.Details{FieldPaths: []string{s.Column}, Reason: "immutable_state", RequiredAction: "keep_server"})
		}, nil
	}
	return nil, fmt.Errorf("unknown rule kind %q", s.Kind)
}

func compileCommitRule(s commitRuleSpec) (validate.CommitValidator, error) {
	if s.Kind != "requireSiblingWhen" {
		return nil, fmt.Errorf("unknown commit rule kind %q", s.Kind)
	}
	if s.Table == "" || s.Column == "" {
		return nil, errors.New("requireSiblingWhen needs table and column")
	}
	if err := validate.CheckCode(s.Code); err != nil {
		return nil, err
	}
	equals, err := driverValue(s.Equals)
	if err != nil {
		return nil, fmt.Errorf("equals: %w", err)
	}
	return func(_ context.Context, c *validate.Commit) error {
		for _, trigger := range c.Operations {
			if trigger.Table != s.Table || trigger.Row == nil || !sameValue(trigger.Row[s.Column], equals) {
				continue
			}
			for _, op := range c.Operations {
				if op.Table == s.Table && op.RowID == trigger.RowID+s.SiblingRowIDSuffix {
					return nil
				}
			}
			return validate.Reject(s.Code, "the commit needs a sibling operation",
				&validate.Details{FieldPaths: []string{s.Column}, Reason: "missing_sibling_operation",
					RequiredAction: "repair_aggregate"}).AtOp(trigger.OpIndex)
		}
		return nil
	}, nil
}

// driverValue decodes a driver row value (JSON null, boolean, number,
// string, or {"$bytes": hex}) into the Go value a validate.Row holds.
func driverValue(raw json.RawMessage) (any, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	switch x := v.(type) {
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n, nil
		}
		return x.Float64()
	case map[string]any:
		h, ok := x["$bytes"].(string)
		if !ok || len(x) != 1 {
			return nil, errors.New("an object value must be {\"$bytes\": hex}")
		}
		return hex.DecodeString(h)
	case nil, bool, string:
		return x, nil
	}
	return nil, fmt.Errorf("unsupported value %s", raw)
}

// sameValue compares two row values as the catalog's rules do: by value,
// bytes by content, an integer equal to the same float.
func sameValue(a, b any) bool {
	switch x := a.(type) {
	case []byte:
		y, ok := b.([]byte)
		return ok && bytes.Equal(x, y)
	case int64:
		if y, ok := b.(float64); ok {
			return float64(x) == y
		}
	case float64:
		if y, ok := b.(int64); ok {
			return x == float64(y)
		}
	}
	if _, ok := b.([]byte); ok {
		return false
	}
	return a == b
}

// utf16Len is a string's length in UTF-16 code units, as the catalog's
// JavaScript rules count characters.
func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}
