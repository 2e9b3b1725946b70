package sspclient

import (
	"context"
	"errors"

	"github.com/syncgo/syncgo/wire"
)

// ErrNoEpoch is returned by Push at wire version 2 and later before the
// client has accepted a log epoch: acquiring one takes a round with a
// pull (Sync).
var ErrNoEpoch = errors.New("sspclient: no log epoch accepted yet; run Sync first")

// Push runs one push-only POST /sync (§6.10): the outbox, up to
// MaxOperationsPerRequest operations, without PULL_HEADER, so that the
// server neither pulls nor rewrites the client's subscription record. It
// returns a nil result when the outbox is empty.
func (c *Client) Push(ctx context.Context) (*RoundResult, error) {
	c.roundMu.Lock()
	defer c.roundMu.Unlock()
	req, rs := c.buildRequest()
	if req.Version >= wire.Version2 && req.Header.LogEpoch == nil {
		return nil, ErrNoEpoch
	}
	if len(req.Commits) == 0 {
		return nil, nil
	}
	req.Pull, req.Subscriptions = nil, nil
	rs.reqSubs = map[string]sentSub{}
	return c.exchange(ctx, req, rs)
}
