package syncgo

import (
	"context"
	"time"
)

// SetReleaseSpacingForTest sets the least spacing of the server's memory
// releases after bursts (a second otherwise).
func SetReleaseSpacingForTest(c *Config, d time.Duration) { c.Realtime.releaseSpacing = d }

// GrantResult is one actor's values of one grant query, or the error of
// its resolution ("" when none), for tests.
type GrantResult struct {
	Values []string
	Err    string
}

// GrantPassForTest reads the grant queries of the actors of a partition
// as a pass does (one statement per chunk, Postgres only) and returns
// what the pass read: actor → query index → result.
func (s *Server) GrantPassForTest(ctx context.Context, partition string, actors []string) map[string]map[int]GrantResult {
	ctx = s.grants.prepare(ctx, map[string][]string{partition: actors})
	pass, _ := ctx.Value(grantPassKey{}).(*grantPass)
	out := map[string]map[int]GrantResult{}
	if pass == nil {
		return out
	}
	for k, r := range pass.read {
		if out[k.actor] == nil {
			out[k.actor] = map[int]GrantResult{}
		}
		res := GrantResult{Values: r.values}
		if r.err != nil {
			res = GrantResult{Err: r.err.Error()}
		}
		out[k.actor][k.query] = res
	}
	return out
}

// GrantPassHitsForTest counts the resolutions served from a pass.
func (s *Server) GrantPassHitsForTest() int64 { return s.grants.passHits.Load() }

// SetGrantPassRowsForTest bounds the rows of a pass's statement.
func (s *Server) SetGrantPassRowsForTest(n int) { s.grants.passRows = n }

// GrantOneForTest runs the grant queries of one actor as a resolution
// does outside a pass.
func (s *Server) GrantOneForTest(ctx context.Context, partition, actor string) map[int]GrantResult {
	out := map[int]GrantResult{}
	for qi, q := range s.grants.queries {
		values, err := s.grants.run(ctx, q, qi, ScopeRequest{Partition: partition, ActorID: actor})
		if err != nil {
			out[qi] = GrantResult{Err: err.Error()}
			continue
		}
		out[qi] = GrantResult{Values: values}
	}
	return out
}

// BodyMemoryInUseForTest is the request body bytes counted against
// MaxBodyMemory now.
func (s *Server) BodyMemoryInUseForTest() int64 { return s.bodyMem.inUse() }

// RealtimePartitionsForTest is the number of partitions the realtime hub
// keeps state for.
func (s *Server) RealtimePartitionsForTest() int { return s.hub.Partitions() }

// TouchedPartitionsForTest is the number of partitions the engine
// remembers as served (touch throttling and the retention rounds).
func (s *Server) TouchedPartitionsForTest() int { return s.eng.TouchedPartitions() }
