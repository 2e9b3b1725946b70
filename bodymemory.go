package syncgo

import (
	"errors"
	"io"
	"net/http"
	"sync/atomic"

	"github.com/syncgo/syncgo/internal/realtime"
)

// errBodyMemory marks a request body refused because the bodies being
// read or held at once have taken the whole budget (Config.MaxBodyMemory).
var errBodyMemory = errors.New("request bodies in memory are at their limit")

// bodyMemory bounds the bytes of request bodies that the server reads
// and holds at once. Bodies are read whole before a request is admitted
// (admission bounds the requests served, not those being read), so
// without it N clients sending MaxRequestBytes each would cost N times
// that. A body whose next bytes would take the total over the budget is
// refused at once, as a full admission queue is, with sync.rate_limited
// (503 and Retry-After): the client retries when the bodies before it
// are done. Waiting for room instead could deadlock bodies that each
// hold part of it.
type bodyMemory struct {
	max     int64 // 0: unbounded
	used    atomic.Int64
	refused atomic.Int64
}

func newBodyMemory(max int64) *bodyMemory {
	return &bodyMemory{max: max}
}

// reader counts r's bytes past realtime.BodyFreeBytes against the budget; release
// gives them back once the request no longer holds its body.
func (m *bodyMemory) reader(r io.Reader) *countedBody {
	return &countedBody{r: r, m: m}
}

// TakeBody reserves n bytes (realtime.BodyBudget), or reports false
// when they would take the total over the budget.
func (m *bodyMemory) TakeBody(n int64) bool {
	if m.max <= 0 {
		return true
	}
	if m.used.Add(n) > m.max {
		m.used.Add(-n)
		m.refused.Add(1)
		return false
	}
	return true
}

// GiveBody returns n bytes reserved by TakeBody.
func (m *bodyMemory) GiveBody(n int64) {
	if m.max > 0 {
		m.used.Add(-n)
	}
}

// inUse is the number of body bytes counted now.
func (m *bodyMemory) inUse() int64 { return m.used.Load() }

// countedBody is a request body whose bytes are counted against a
// bodyMemory budget.
type countedBody struct {
	r     io.Reader
	m     *bodyMemory
	read  int64
	taken int64
	// refused: a read failed with errBodyMemory.
	refused bool
}

func (c *countedBody) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read += int64(n)
	if c.m.max <= 0 {
		return n, err
	}
	if over := c.read - realtime.BodyFreeBytes - c.taken; over > 0 {
		if !c.m.TakeBody(over) {
			c.refused = true
			return 0, errBodyMemory
		}
		c.taken += over
	}
	return n, err
}

// release gives back what the body took (idempotent).
func (c *countedBody) release() {
	if c.taken > 0 {
		c.m.used.Add(-c.taken)
		c.taken = 0
	}
}

// refuseBodyMemory answers a body refused for want of memory as a full
// admission queue is answered (the rest of the body is not read: the
// connection closes).
func (s *Server) refuseBodyMemory(w http.ResponseWriter, route string) {
	w.Header().Set("Connection", "close")
	w.Header().Set("Retry-After", s.admit.retryAfter())
	s.writeError(w, route, s.admit.overloaded())
}

// realtimeBodies is the budget the realtime hub shares (nil: unbounded,
// so that the hub skips the accounting).
func (s *Server) realtimeBodies() realtime.BodyBudget {
	if s.bodyMem.max <= 0 {
		return nil
	}
	return s.bodyMem
}
