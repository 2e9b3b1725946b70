package conformance

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

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

// compileRule compiles a catalog row rule with the rule kinds of package
// validate, its guard value decoded as a driver value.
func compileRule(s ruleSpec) (validate.Validator, error) {
	guard, err := driverValue(s.GuardValue)
	if err != nil {
		return nil, fmt.Errorf("guardValue: %w", err)
	}
	return validate.RowRule{Kind: s.Kind, Column: s.Column, Max: s.Max, GuardColumn: s.GuardColumn,
		GuardValue: guard, Code: s.Code, Message: s.Message}.Compile()
}

func compileCommitRule(s commitRuleSpec) (validate.CommitValidator, error) {
	equals, err := driverValue(s.Equals)
	if err != nil {
		return nil, fmt.Errorf("equals: %w", err)
	}
	return validate.CommitRule{Kind: s.Kind, Table: s.Table, Column: s.Column, Equals: equals,
		SiblingRowIDSuffix: s.SiblingRowIDSuffix, Code: s.Code}.Compile()
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
