package sspclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"

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
	body, err := req.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("sspclient: encode request: %w", err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/sync", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", ContentType)
	c.setCommonHeaders(hreq)
	resp, err := c.opts.HTTPClient.Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("sspclient: sync request: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, readHTTPError(resp)
	}
	rs.res.ContentEncoding = resp.Header.Get("Content-Encoding")
	dec, closeDec, err := decodedBody(resp)
	if err != nil {
		return rs.res, err
	}
	defer closeDec()
	err = rs.read(ctx, wire.NewDecoder(dec, wire.DecoderOptions{Kind: wire.KindResponse, MaxFrameBytes: 256 << 20}))
	return rs.res, err
}
