package validate

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"unicode/utf16"
)

// Declarative rules: the rule kinds a configuration file can name (the
// conformance catalog's kinds), compiled into the same Validator and
// CommitValidator callbacks a Go host writes. syncgo serve reads them from
// its config file (docs/validators.md); conformance mode installs them.

// RowRule is a declarative write rule of one table.
//
//   - maxLength: Column, a string, has at most Max characters (UTF-16 code
//     units, as a JavaScript client counts them); a longer one is rejected
//     with Code, reason max_length_exceeded.
//   - immutableWhen: while the stored row's GuardColumn equals GuardValue,
//     an update may not change Column (Code, reason immutable_state).
//   - unexpectedError: every write fails with Message as a host error (the
//     client sees sync.constraint_violation): for tests.
type RowRule struct {
	Kind        string `yaml:"kind" json:"kind"`
	Column      string `yaml:"column" json:"column"`
	Max         *int   `yaml:"max" json:"max"`
	GuardColumn string `yaml:"guard_column" json:"guardColumn"`
	GuardValue  any    `yaml:"guard_value" json:"guardValue"`
	Code        string `yaml:"code" json:"code"`
	Message     string `yaml:"message" json:"message"`
}

// CommitRule is a declarative whole-commit rule.
//
//   - requireSiblingWhen: a commit that writes a row of Table whose Column
//     equals Equals must also write the row whose id is that row's id with
//     SiblingRowIDSuffix appended (Code, reason missing_sibling_operation,
//     naming the triggering operation).
type CommitRule struct {
	Kind               string `yaml:"kind" json:"kind"`
	Table              string `yaml:"table" json:"table"`
	Column             string `yaml:"column" json:"column"`
	Equals             any    `yaml:"equals" json:"equals"`
	SiblingRowIDSuffix string `yaml:"sibling_row_id_suffix" json:"siblingRowIdSuffix"`
	Code               string `yaml:"code" json:"code"`
}

// Compile returns the rule's validator, or what is wrong with the rule.
func (s RowRule) Compile() (Validator, error) {
	switch s.Kind {
	case "unexpectedError":
		msg := s.Message
		return func(context.Context, *Write) error { return errors.New(msg) }, nil
	case "maxLength":
		if s.Column == "" || s.Max == nil || *s.Max < 0 {
			return nil, errors.New("maxLength needs column and a non-negative max")
		}
		if err := checkCode(s.Code); err != nil {
			return nil, err
		}
		max, column, code := *s.Max, s.Column, s.Code
		return func(_ context.Context, w *Write) error {
			if w.Row == nil {
				return nil // a delete carries no row
			}
			if v, ok := w.Row[column].(string); ok && utf16Len(v) > max {
				return Reject(code, fmt.Sprintf("%s exceeds %d characters", column, max),
					&Details{FieldPaths: []string{column}, Reason: "max_length_exceeded", RequiredAction: "edit_fields"})
			}
			return nil
		}, nil
	case "immutableWhen":
		if s.Column == "" || s.GuardColumn == "" {
			return nil, errors.New("immutableWhen needs column and guard_column")
		}
		if err := checkCode(s.Code); err != nil {
			return nil, err
		}
		guard, err := RuleValue(s.GuardValue)
		if err != nil {
			return nil, fmt.Errorf("guard value: %w", err)
		}
		column, guardColumn, code := s.Column, s.GuardColumn, s.Code
		return func(_ context.Context, w *Write) error {
			if w.Row == nil || w.Stored == nil {
				return nil // an insert or a delete
			}
			if !SameValue(w.Stored[guardColumn], guard) || SameValue(w.Row[column], w.Stored[column]) {
				return nil
			}
			return Reject(code, fmt.Sprintf("%s is immutable in this state", column),
				&Details{FieldPaths: []string{column}, Reason: "immutable_state", RequiredAction: "keep_server"})
		}, nil
	case "":
		return nil, errors.New("a rule needs a kind (maxLength, immutableWhen)")
	}
	return nil, fmt.Errorf("unknown rule kind %q (maxLength, immutableWhen)", s.Kind)
}

// Compile returns the rule's commit validator, or what is wrong with it.
func (s CommitRule) Compile() (CommitValidator, error) {
	if s.Kind != "requireSiblingWhen" {
		return nil, fmt.Errorf("unknown commit rule kind %q (requireSiblingWhen)", s.Kind)
	}
	if s.Table == "" || s.Column == "" {
		return nil, errors.New("requireSiblingWhen needs table and column")
	}
	if err := checkCode(s.Code); err != nil {
		return nil, err
	}
	equals, err := RuleValue(s.Equals)
	if err != nil {
		return nil, fmt.Errorf("equals: %w", err)
	}
	table, column, suffix, code := s.Table, s.Column, s.SiblingRowIDSuffix, s.Code
	return func(_ context.Context, c *Commit) error {
		for _, trigger := range c.Operations {
			if trigger.Table != table || trigger.Row == nil || !SameValue(trigger.Row[column], equals) {
				continue
			}
			found := false
			for _, op := range c.Operations {
				if op.Table == table && op.RowID == trigger.RowID+suffix {
					found = true
					break
				}
			}
			if !found {
				return Reject(code, "the commit needs a sibling operation",
					&Details{FieldPaths: []string{column}, Reason: "missing_sibling_operation",
						RequiredAction: "repair_aggregate"}).AtOp(trigger.OpIndex)
			}
		}
		return nil
	}, nil
}

// Chain runs validators in order; the first error is the result.
func Chain(vs ...Validator) Validator {
	if len(vs) == 1 {
		return vs[0]
	}
	return func(ctx context.Context, w *Write) error {
		for _, v := range vs {
			if err := v(ctx, w); err != nil {
				return err
			}
		}
		return nil
	}
}

// ChainCommit runs commit validators in order; the first error is the
// result.
func ChainCommit(vs ...CommitValidator) CommitValidator {
	if len(vs) == 1 {
		return vs[0]
	}
	return func(ctx context.Context, c *Commit) error {
		for _, v := range vs {
			if err := v(ctx, c); err != nil {
				return err
			}
		}
		return nil
	}
}

// RuleValue normalizes a value written in a rule (decoded from YAML or
// JSON) to the Go value a Row holds: nil, bool, string, int64 (integers,
// whatever their Go type), float64, or []byte from {"$bytes": hex}.
func RuleValue(v any) (any, error) {
	switch x := v.(type) {
	case nil, bool, string, int64, float64, []byte:
		return x, nil
	case int:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case uint64:
		if x > math.MaxInt64 {
			return nil, fmt.Errorf("integer %d out of range", x)
		}
		return int64(x), nil
	case float32:
		return float64(x), nil
	case interface{ Int64() (int64, error) }: // json.Number
		if n, err := x.Int64(); err == nil {
			return n, nil
		}
		if f, ok := v.(interface{ Float64() (float64, error) }); ok {
			return f.Float64()
		}
	case map[string]any:
		h, ok := x["$bytes"].(string)
		if !ok || len(x) != 1 {
			return nil, errors.New(`an object value must be {"$bytes": hex}`)
		}
		return hex.DecodeString(h)
	}
	return nil, fmt.Errorf("unsupported value %v (%T)", v, v)
}

// SameValue compares two row values as the rules do: by value, bytes by
// content, an integer equal to the same float.
func SameValue(a, b any) bool {
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

// utf16Len is a string's length in UTF-16 code units.
func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}
