//go:build !linux

package bench

// sockPoller is Linux only: elsewhere every socket is read by a goroutine.
type sockPoller struct{}

func newSockPoller(int) (*sockPoller, error) { return nil, errNoPoller }

func (p *sockPoller) add(*vsocket) bool { return false }

func (p *sockPoller) stop() {}
