package realtime

import (
	"testing"
	"time"

	"github.com/syncgo/syncgo/internal/engine"
)

// A heartbeat of a nanosecond (realtime.heartbeat: 1ns is a valid Go
// duration, accepted by config check) does not panic the hub's loop,
// which ticks at half the interval: time.NewTicker panics on zero.
func TestHubTinyHeartbeat(t *testing.T) {
	st, sc := testStore(t)
	h := NewHub(Config{Engine: engine.New(engine.Config{Store: st, Schema: sc}), Store: st, Heartbeat: time.Nanosecond})
	time.Sleep(20 * time.Millisecond)
	h.Close()
}
