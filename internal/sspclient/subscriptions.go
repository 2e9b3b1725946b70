package sspclient

import (
	"fmt"
	"slices"

	"github.com/syncgo/syncgo/wire"
)

// subscription is the durable state of one subscription (§4.1).
type subscription struct {
	id, table string
	scopes    wire.ScopeMap // requested, canonical order
	cursor    int64
	// bootstrapState is the resume token of the last SUB_END, nil when the
	// bootstrap is complete or not started.
	bootstrapState *string
	// effective is the last effective-scope echo while active: the purge
	// scope of a revocation (§3.3).
	effective wire.ScopeMap
	status    wire.SubStatus
	reason    string
}

// SubscriptionState is a snapshot of a subscription's progress.
type SubscriptionState struct {
	ID     string
	Table  string
	Scopes wire.ScopeMap
	// Cursor is the persisted nextCursor; -1 before the first SUB_END.
	Cursor int64
	// BootstrapState is the persisted resume token, or nil.
	BootstrapState *string
	// Effective is the last effective-scope echo of an active section.
	Effective wire.ScopeMap
	// Status is the status of the last section received, zero before one.
	Status wire.SubStatus
	// Reason is the reason code of the last revoked or reset section.
	Reason string
}

// Subscribe registers a subscription to table with requested scopes
// (variable → values). Re-declaring the same id, table and scopes keeps
// its progress; the same id with another table or scopes is refused
// (client.subscription_intent_mismatch, §4.1).
func (c *Client) Subscribe(id, table string, scopes map[string][]string) error {
	t, ok := c.schema.Table(table)
	if !ok {
		return fmt.Errorf("sspclient: unknown table %q", table)
	}
	sm := make(wire.ScopeMap, 0, len(scopes))
	for k, vals := range scopes {
		if _, ok := t.VariableColumn(k); !ok {
			return fmt.Errorf("sspclient: table %s declares no scope variable %q", table, k)
		}
		vs := slices.Clone(vals)
		slices.SortFunc(vs, wire.CompareKeys)
		sm = append(sm, wire.ScopeValues{Key: k, Values: slices.Compact(vs)})
	}
	slices.SortFunc(sm, func(a, b wire.ScopeValues) int { return wire.CompareKeys(a.Key, b.Key) })
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.subs {
		if s.id != id {
			continue
		}
		if s.table != table || !sameScopes(s.scopes, sm) {
			return fmt.Errorf("sspclient: client.subscription_intent_mismatch: subscription %q is registered for another table or scopes", id)
		}
		return nil
	}
	c.subs = append(c.subs, &subscription{id: id, table: table, scopes: sm, cursor: -1})
	return nil
}

// Unsubscribe forgets a subscription; its rows stay (omission is
// unregistration, §4.1).
func (c *Client) Unsubscribe(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.subs = slices.DeleteFunc(c.subs, func(s *subscription) bool { return s.id == id })
}

// Subscription returns the state of a subscription.
func (c *Client) Subscription(id string) (SubscriptionState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sub(id)
	if s == nil {
		return SubscriptionState{}, false
	}
	st := SubscriptionState{ID: s.id, Table: s.table, Scopes: s.scopes, Cursor: s.cursor,
		Effective: s.effective, Status: s.status, Reason: s.reason}
	if s.bootstrapState != nil {
		tok := *s.bootstrapState
		st.BootstrapState = &tok
	}
	return st, true
}

// sub finds a subscription by id. The caller holds c.mu.
func (c *Client) sub(id string) *subscription {
	for _, s := range c.subs {
		if s.id == id {
			return s
		}
	}
	return nil
}

// resetReplica runs the log reset of §2.1 after an epoch change: synced
// rows, cursors, effective scopes and bootstrap state go; the clientId,
// the outbox and the outcomes stay. The caller holds c.mu.
func (c *Client) resetReplica() {
	c.rows = map[string]map[string]Row{}
	c.rowSeq = map[string]map[string]int64{} // a new log numbers its commits anew
	c.droppedMark = -1
	for _, s := range c.subs {
		s.cursor, s.bootstrapState, s.effective, s.status, s.reason = -1, nil, nil, 0, ""
	}
}

func sameScopes(a, b wire.ScopeMap) bool {
	return slices.EqualFunc(a, b, func(x, y wire.ScopeValues) bool {
		return x.Key == y.Key && slices.Equal(x.Values, y.Values)
	})
}

func scopeMapToMap(m wire.ScopeMap) map[string][]string {
	out := make(map[string][]string, len(m))
	for _, e := range m {
		out[e.Key] = e.Values
	}
	return out
}
