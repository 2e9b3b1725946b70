package sspclient

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/wire"
)

// segmentRef downloads a referenced rows segment from the direct endpoint
// (§5.5), checks it against its descriptor and applies it.
func (rs *roundState) segmentRef(ctx context.Context, ref *wire.SegmentRef) error {
	c := rs.c
	if rs.open == nil {
		return fmt.Errorf("sspclient: SEGMENT_REF outside a subscription section")
	}
	switch {
	case ref.MediaType != wire.MediaRows || c.opts.Accept&wire.AcceptExternalRows == 0:
		return fmt.Errorf("sspclient: sync.invalid_request: SEGMENT_REF of a media type not advertised")
	case ref.URL != nil && c.opts.Accept&wire.AcceptSignedURLs == 0:
		return fmt.Errorf("sspclient: sync.invalid_request: SEGMENT_REF carries a URL that was not advertised")
	case ref.Table != rs.open.table:
		return fmt.Errorf("sspclient: SEGMENT_REF for table %q in a subscription to %q", ref.Table, rs.open.table)
	}
	var (
		b   []byte
		err error
	)
	if ref.URL != nil {
		// The URL is the whole grant and the only delivery (§5.4): never
		// past its expiry, never with host credentials, and a failure
		// fails the descriptor (no fall-through to the direct endpoint).
		if c.opts.Now() >= ref.URLExpiresAtMs {
			return fmt.Errorf("sspclient: sync.segment_expired: the signed URL of %s expired before the fetch", ref.SegmentID)
		}
		b, err = c.FetchSegmentURL(ctx, *ref.URL, ref.SegmentID)
	} else {
		b, err = c.DownloadSegment(ctx, ref.SegmentID, scopeMapToMap(rs.open.scopes))
	}
	if err != nil {
		return err
	}
	if int64(len(b)) != ref.ByteLength {
		return fmt.Errorf("sspclient: sync.invalid_request: segment %s has %d bytes, descriptor says %d", ref.SegmentID, len(b), ref.ByteLength)
	}
	return rs.segment(ref, b)
}

// FetchSegmentURL fetches a segment from a signed URL with no
// credentials (§5.4) and verifies its bytes against the content address.
func (c *Client) FetchSegmentURL(ctx context.Context, rawURL, segmentID string) ([]byte, error) {
	r, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, err
	}
	r.Header.Set("Accept-Encoding", c.opts.AcceptEncoding)
	return c.fetchSegment(r, segmentID)
}

// DownloadSegment downloads a segment from GET <base>/segments/{id} with
// the X-Syncular-Scopes header set to the canonical JSON of requested
// (§5.5), and verifies its bytes against the content address (§5.1).
func (c *Client) DownloadSegment(ctx context.Context, segmentID string, requested map[string][]string) ([]byte, error) {
	r, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/segments/"+url.PathEscape(segmentID), nil)
	if err != nil {
		return nil, err
	}
	c.setCommonHeaders(r)
	r.Header.Set("X-Syncular-Scopes", string(wire.CanonicalScopeJSON(requested)))
	return c.fetchSegment(r, segmentID)
}

// fetchSegment runs a segment request and checks the bytes.
func (c *Client) fetchSegment(r *http.Request, segmentID string) ([]byte, error) {
	resp, err := c.opts.HTTPClient.Do(r)
	if err != nil {
		return nil, fmt.Errorf("sspclient: segment download: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, readHTTPError(resp)
	}
	body, release, err := decodedBody(resp)
	if err != nil {
		return nil, err
	}
	defer release()
	b, err := io.ReadAll(body)
	if err != nil {
		return nil, fmt.Errorf("sspclient: segment download: %w", err)
	}
	sum := sha256.Sum256(b)
	if want := "sha256:" + hex.EncodeToString(sum[:]); want != segmentID {
		return nil, fmt.Errorf("sspclient: sync.invalid_request: segment bytes hash to %s, not %s", want, segmentID)
	}
	return b, nil
}

// segment applies one rows segment of the open section, block by block
// (§5.2, §5.6). ref is nil for SEGMENT_INLINE.
func (rs *roundState) segment(ref *wire.SegmentRef, payload []byte) error {
	s, sec := rs.open, rs.section
	if s == nil {
		return fmt.Errorf("sspclient: segment outside a subscription section")
	}
	t, _ := rs.c.schema.Table(s.table)
	seg, err := wire.DecodeSegment(payload)
	if err != nil {
		return fmt.Errorf("sspclient: segment: %w", err)
	}
	if err := checkSegmentHeader(t, rs.c.schema.Version(), seg.Header); err != nil {
		return err
	}
	first := rs.segsSeen == 0
	if ref != nil {
		first = ref.RowCursor == nil
	}
	rs.segsSeen++
	if rs.fresh && first {
		rs.c.mu.Lock()
		sec.Purged += rs.c.purge(t, sec.Effective)
		rs.c.mu.Unlock()
	}
	codec := t.RowCodec()
	segRows := 0
	for _, block := range seg.Blocks {
		segRows += len(block)
		rows := make([]Row, len(block))
		for i, sr := range block {
			vals, err := codec.DecodeRow(sr.Row)
			if err != nil {
				return fmt.Errorf("sspclient: segment row: %w", err)
			}
			id, ok := t.RowID(vals)
			if !ok {
				return fmt.Errorf("sspclient: segment row without a primary key")
			}
			rows[i] = Row{ID: id, Version: sr.ServerVersion, Values: vals}
		}
		rs.c.mu.Lock()
		for _, r := range rows {
			rs.c.putRow(t.Name(), r)
		}
		rs.c.mu.Unlock()
		sec.Rows += len(rows)
	}
	sec.Segments++
	sec.MaxSegmentRows = max(sec.MaxSegmentRows, segRows)
	if ref != nil {
		sec.Refs = append(sec.Refs, *ref)
	}
	return nil
}

// checkSegmentHeader is the receiver's column-table check (§5.2): the
// segment must be encoded for the subscription's table at the client's
// schema version.
func checkSegmentHeader(t *schema.CompiledTable, version int32, h wire.SegmentHeader) error {
	if h.Table != t.Name() || h.SchemaVersion != version || !slices.Equal(h.Columns, t.WireColumns()) {
		return fmt.Errorf("sspclient: sync.schema_mismatch: segment for %s v%d does not match table %s v%d",
			h.Table, h.SchemaVersion, t.Name(), version)
	}
	return nil
}
