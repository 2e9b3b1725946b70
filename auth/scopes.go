package auth

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/schema"
)

// ScopeRules map each scope variable of the schema to the rules that
// grant it values, from a verified token's claims. The values an actor
// is allowed for a variable are the union of what its rules give; a
// variable no rule gives a value is not allowed at all.
type ScopeRules map[string][]ScopeRule

// ScopeRule grants values of one scope variable. Exactly one of Claim,
// Value, Values and Query is set; When, if set, must hold for the rule
// to apply (not with Query).
type ScopeRule struct {
	// Claim grants the claim's values: a string, a number, or an array of
	// them. A claim value "*" is never a wildcard (it is dropped): only
	// Value or Values grant every value.
	Claim string `yaml:"claim"`
	// Value grants one constant value; "*" grants every value.
	Value string `yaml:"value"`
	// Values grants constant values; "*" grants every value.
	Values []string `yaml:"values"`
	// Query grants the values of its first column, read from the
	// application's synced rows at every resolution (a
	// syncgo.GrantQuery: one SELECT over the schema's tables of the
	// actor's partition, :actor its only parameter). It runs in the
	// server (GrantQueries), not in Resolve.
	Query string `yaml:"query"`
	// PostgresQuery, when set, replaces Query on a Postgres store.
	PostgresQuery string `yaml:"postgres_query"`
	// MaxValues bounds a Query's rows (syncgo.GrantQuery.MaxValues).
	MaxValues int `yaml:"max_values"`
	// When is the condition of the rule.
	When *Condition `yaml:"when"`
}

// Condition holds when a claim equals a value, or is an array holding
// it. Numbers and booleans compare by their JSON text ("3", "true").
type Condition struct {
	Claim  string `yaml:"claim"`
	Equals string `yaml:"equals"`
}

// A claim name is looked up as a top-level claim first; when there is
// none, a dotted name is a path into nested objects
// ("app_metadata.lists").

// Scopes are ScopeRules compiled against a schema.
type Scopes struct {
	vars []compiledVar
}

type compiledVar struct {
	name  string
	rules []ScopeRule
}

// CompileScopes checks rules against the schema: every variable must be
// a scope variable the schema declares, every rule well formed. A
// schema variable without rules is allowed (no actor is granted it);
// Unruled lists them.
func CompileScopes(rules ScopeRules, sc *schema.Compiled) (*Scopes, error) {
	if sc == nil {
		return nil, errors.New("auth: a schema is required to compile scope rules")
	}
	var errs []error
	names := make([]string, 0, len(rules))
	for name := range rules {
		names = append(names, name)
	}
	sort.Strings(names)
	out := &Scopes{}
	for _, name := range names {
		if !sc.DeclaresVariable(name) {
			errs = append(errs, fmt.Errorf("scopes.%s: the schema declares no scope variable %q (it declares %s)",
				name, name, strings.Join(sc.Variables(), ", ")))
			continue
		}
		for i, r := range rules[name] {
			err := r.check()
			if err == nil && r.Query != "" {
				err = syncgo.CheckGrantQuery(syncgo.GrantQuery{Variable: name, SQL: r.Query, PostgresSQL: r.PostgresQuery, MaxValues: r.MaxValues}, sc)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("scopes.%s[%d]: %w", name, i, err))
			}
		}
		out.vars = append(out.vars, compiledVar{name: name, rules: slices.Clone(rules[name])})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// Unruled lists the schema's scope variables that no rule grants.
func (s *Scopes) Unruled(sc *schema.Compiled) []string {
	var out []string
	for _, v := range sc.Variables() {
		if !slices.ContainsFunc(s.vars, func(c compiledVar) bool { return c.name == v && len(c.rules) > 0 }) {
			out = append(out, v)
		}
	}
	return out
}

func (r ScopeRule) check() error {
	n := 0
	if r.Claim != "" {
		n++
	}
	if r.Value != "" {
		n++
	}
	if r.Values != nil {
		n++
	}
	if r.Query != "" {
		n++
	}
	if n != 1 {
		return errors.New("set exactly one of claim, value, values, query")
	}
	if r.Query == "" && (r.PostgresQuery != "" || r.MaxValues != 0) {
		return errors.New("postgres_query and max_values belong to a query rule")
	}
	if r.Query != "" && r.When != nil {
		return errors.New("when does not apply to a query rule (put the condition in its SQL)")
	}
	if r.Values != nil && len(r.Values) == 0 {
		return errors.New("values is empty")
	}
	consts := r.Values
	if r.Value != "" {
		consts = []string{r.Value}
	}
	for _, v := range consts {
		if p := valueProblem(v); p != "" {
			return fmt.Errorf("value %q: %s", v, p)
		}
	}
	if r.When != nil && (r.When.Claim == "" || r.When.Equals == "") {
		return errors.New("when: set claim and equals")
	}
	return nil
}

// valueProblem says why v cannot be a scope value ("" when it can).
func valueProblem(v string) string {
	switch {
	case v == "":
		return "empty"
	case len(v) > syncgo.MaxIdentifierBytes:
		return fmt.Sprintf("longer than %d bytes", syncgo.MaxIdentifierBytes)
	case !utf8.ValidString(v):
		return "not UTF-8"
	case strings.IndexByte(v, 0) >= 0:
		return "holds a NUL character"
	}
	return ""
}

// Resolve returns the scopes claims allow: variable to values, "*" for
// every value. Variables granted nothing are absent.
func (s *Scopes) Resolve(claims map[string]any) map[string][]string {
	out := map[string][]string{}
	for _, v := range s.vars {
		var vals []string
		wildcard := false
		for _, r := range v.rules {
			if r.Query != "" || r.When != nil && !holds(claims, *r.When) {
				continue // query rules run in the server (GrantQueries)
			}
			switch {
			case r.Claim != "":
				for _, c := range claimStrings(lookupClaim(claims, r.Claim)) {
					if c != "*" && valueProblem(c) == "" {
						vals = append(vals, c)
					}
				}
			case r.Value != "":
				vals = append(vals, r.Value)
			default:
				vals = append(vals, r.Values...)
			}
		}
		for _, x := range vals {
			if x == "*" {
				wildcard = true
			}
		}
		switch {
		case wildcard:
			out[v.name] = []string{"*"}
		case len(vals) > 0:
			slices.Sort(vals)
			out[v.name] = slices.Compact(vals)
		}
	}
	return out
}

// GrantQueries returns the query rules, for syncgo.Config.GrantQueries
// (and syncgo.CheckGrantQueries).
func (s *Scopes) GrantQueries() []syncgo.GrantQuery {
	var out []syncgo.GrantQuery
	for _, v := range s.vars {
		for _, r := range v.rules {
			if r.Query != "" {
				out = append(out, syncgo.GrantQuery{Variable: v.name, SQL: r.Query, PostgresSQL: r.PostgresQuery, MaxValues: r.MaxValues})
			}
		}
	}
	return out
}

func holds(claims map[string]any, c Condition) bool {
	return slices.Contains(claimStrings(lookupClaim(claims, c.Claim)), c.Equals)
}

// lookupClaim finds a claim by name, or by dotted path into nested
// objects when no top-level claim has the name.
func lookupClaim(claims map[string]any, name string) any {
	if v, ok := claims[name]; ok {
		return v
	}
	var cur any = claims
	for part := range strings.SplitSeq(name, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		if cur, ok = m[part]; !ok {
			return nil
		}
	}
	return cur
}

// claimStrings flattens a claim value to strings: a string, a number or
// a boolean is one, an array gives each of its scalar elements; objects
// give nothing.
func claimStrings(v any) []string {
	switch x := v.(type) {
	case string:
		return []string{x}
	case json.Number:
		return []string{x.String()}
	case float64:
		return []string{strconv.FormatFloat(x, 'f', -1, 64)}
	case bool:
		return []string{strconv.FormatBool(x)}
	case []any:
		var out []string
		for _, e := range x {
			if _, nested := e.([]any); nested {
				continue
			}
			out = append(out, claimStrings(e)...)
		}
		return out
	case []string:
		return x
	}
	return nil
}
