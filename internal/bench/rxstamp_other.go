//go:build !linux

package bench

import (
	"context"
	"net"
	"time"
)

// rxClock records no receive times off Linux: the kernel-stamped spread
// is not reported there.
type rxClock struct{}

func (k *rxClock) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

func (k *rxClock) last() (time.Time, bool) { return time.Time{}, false }
