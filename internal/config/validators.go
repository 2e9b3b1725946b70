package config

import (
	"fmt"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/validate"
)

// ValidatorRule is a declarative write rule of one table (the config's
// validators list): a validate.RowRule.
type ValidatorRule struct {
	Table string           `yaml:"table"`
	Rule  validate.RowRule `yaml:"rule"`
}

// CompileValidators compiles the declarative rules against the schema: the
// row validators by table (several rules of a table run in order) and the
// commit validator (nil without rules). An unknown table or column, or a
// rule the kinds refuse, is an error naming the rule.
func (c Config) CompileValidators(sc *schema.Compiled) (map[string]validate.Validator, validate.CommitValidator, error) {
	byTable := map[string][]validate.Validator{}
	for i, r := range c.Validators {
		t, ok := sc.Table(r.Table)
		if !ok {
			return nil, nil, fmt.Errorf("validators[%d]: %q is not a table of the schema", i, r.Table)
		}
		for _, col := range []string{r.Rule.Column, r.Rule.GuardColumn} {
			if col != "" && !hasColumn(t, col) {
				return nil, nil, fmt.Errorf("validators[%d]: table %q has no column %q", i, r.Table, col)
			}
		}
		v, err := r.Rule.Compile()
		if err != nil {
			return nil, nil, fmt.Errorf("validators[%d] (table %q): %w", i, r.Table, err)
		}
		byTable[r.Table] = append(byTable[r.Table], v)
	}
	var row map[string]validate.Validator
	if len(byTable) > 0 {
		row = make(map[string]validate.Validator, len(byTable))
		for t, vs := range byTable {
			row[t] = validate.Chain(vs...)
		}
	}
	var commits []validate.CommitValidator
	for i, r := range c.CommitValidators {
		t, ok := sc.Table(r.Table)
		if !ok {
			return nil, nil, fmt.Errorf("commit_validators[%d]: %q is not a table of the schema", i, r.Table)
		}
		if r.Column != "" && !hasColumn(t, r.Column) {
			return nil, nil, fmt.Errorf("commit_validators[%d]: table %q has no column %q", i, r.Table, r.Column)
		}
		v, err := r.Compile()
		if err != nil {
			return nil, nil, fmt.Errorf("commit_validators[%d]: %w", i, err)
		}
		commits = append(commits, v)
	}
	var commit validate.CommitValidator
	if len(commits) > 0 {
		commit = validate.ChainCommit(commits...)
	}
	return row, commit, nil
}

func hasColumn(t *schema.CompiledTable, name string) bool {
	for _, c := range t.Columns() {
		if c.Name == name {
			return true
		}
	}
	return false
}
