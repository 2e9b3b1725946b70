package engine

import "github.com/syncgo/syncgo/wire"

// effectiveScopes computes requested ∩ allowed per requested key (§3.2
// rule 4) and reports whether the subscription stays active (rule 5).
func effectiveScopes(requested wire.ScopeMap, allowed map[string][]string, resolved bool) (wire.ScopeMap, bool) {
	if !resolved || len(requested) == 0 {
		return wire.ScopeMap{}, false
	}
	out := make(wire.ScopeMap, 0, len(requested))
	for _, req := range requested {
		vals, ok := allowed[req.Key]
		if !ok {
			return wire.ScopeMap{}, false
		}
		var eff []string
		if containsString(vals, "*") {
			eff = append(eff, req.Values...)
		} else {
			for _, v := range req.Values {
				if containsString(vals, v) && !containsString(eff, v) {
					eff = append(eff, v)
				}
			}
		}
		if len(eff) == 0 {
			return wire.ScopeMap{}, false
		}
		out = append(out, wire.ScopeValues{Key: req.Key, Values: eff})
	}
	return out, true
}

func containsString(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func scopeMapToMap(m wire.ScopeMap) map[string][]string {
	out := make(map[string][]string, len(m))
	for _, e := range m {
		out[e.Key] = e.Values
	}
	return out
}
