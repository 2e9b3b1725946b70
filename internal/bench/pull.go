package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/wire"
)

// puller is a lean pulling client for the catch-up and bootstrap
// workloads: it keeps one subscription's cursor, resume token and the log
// epoch, decodes every frame and validates every rows segment (and checks
// every downloaded segment's content address), but keeps no rows, so the
// figures are the server's and the transport's, not a replica's.
type puller struct {
	r        *runner
	header   http.Header
	clientID string
	epoch    *string
	pull     wire.PullHeader
	sub      wire.Subscription
	// codecs and buf are reused from one response to the next: a zstd
	// decoder allocates its window and history buffers when it is made,
	// which cost the catch-up more than decoding the frames did.
	// segCodecs decode the segments downloaded while a response is
	// being read.
	codecs, segCodecs bodyDecoders
	buf               *bufio.Reader
	// allowReset: a reset section (§4.6, §8.4) restarts the subscription
	// with a fresh bootstrap instead of failing the round; resetting is
	// set from its SUB_START to its SUB_END.
	allowReset, resetting bool
}

// checkSegment reads a downloaded segment's body, undoing its
// Content-Encoding, without holding it whole (a buffer of a 10 MB image
// cost the tool more than the server): it checks the content address
// against id and, for a rows segment, validates it block by block
// (wire.SegmentReader makes the checks of DecodeSegment), returning its
// row count.
func (p *puller) checkSegment(enc, id string, body io.Reader, rows bool) (int, error) {
	dec, release, err := p.segCodecs.decode(enc, body)
	if err != nil {
		return 0, err
	}
	defer release()
	h := sha256.New()
	in := io.TeeReader(dec, h)
	n := 0
	if rows {
		sr, err := wire.NewSegmentReader(in, 0)
		if err != nil {
			return 0, fmt.Errorf("segment %s: %w", id, err)
		}
		for {
			block, err := sr.NextBlock()
			if err == io.EOF {
				break
			}
			if err != nil {
				return 0, fmt.Errorf("segment %s: %w", id, err)
			}
			n += len(block)
		}
	}
	// The rest of the body (an image; nothing after a valid rows
	// segment's end marker) counts in the content address.
	if _, err := io.Copy(io.Discard, in); err != nil {
		return 0, err
	}
	if "sha256:"+hex.EncodeToString(h.Sum(nil)) != id {
		return 0, fmt.Errorf("segment %s: content address mismatch", id)
	}
	return n, nil
}

// pullStats reports one round.
type pullStats struct {
	commits, changes, rows, segments int
	// images counts the sqlite segments among segments.
	images int
	// refs counts the segments by reference (SEGMENT_REF), urls those
	// of them fetched from a signed URL.
	refs, urls int
	// epoch reports a header-only epoch response (acquisition or reset).
	epoch bool
	// pending reports an incomplete bootstrap (a resume token).
	pending bool
	// reset reports a reset section (puller.allowReset).
	reset bool
}

func (r *runner) newPuller(i int, pull wire.PullHeader, cursor int64) *puller {
	t := r.gen.table
	return &puller{r: r, header: r.cfg.authHeader(i), clientID: fmt.Sprintf("bench-%s-pull", randomHex(4)), pull: pull,
		sub: wire.Subscription{ID: "bench-" + t.Name(), Table: t.Name(), Cursor: cursor,
			Scopes: wire.ScopeMap{{Key: r.gen.variable, Values: []string{r.cfg.Scope}}}}}
}

// round runs one POST /sync with the subscription.
func (p *puller) round(ctx context.Context) (pullStats, error) {
	return p.exchange(ctx, []*wire.Subscription{&p.sub})
}

// acquireEpoch runs pulls without a subscription until the log epoch is
// known (wire version 2 on; nothing to do at version 1).
func (p *puller) acquireEpoch(ctx context.Context) error {
	for range 3 {
		if p.r.cfg.Wire < wire.Version2 || p.epoch != nil {
			return nil
		}
		if _, err := p.exchange(ctx, nil); err != nil {
			return err
		}
	}
	return fmt.Errorf("no log epoch after 3 rounds")
}

// exchange runs one POST /sync with the given subscriptions.
func (p *puller) exchange(ctx context.Context, subs []*wire.Subscription) (pullStats, error) {
	var st pullStats
	v := p.r.cfg.Wire
	req := &wire.Request{Version: v, Pull: &p.pull, Subscriptions: subs,
		Header: &wire.ReqHeader{ClientID: p.clientID, SchemaVersion: p.r.cfg.Schema.Version()}}
	if v >= wire.Version2 {
		req.Header.LogEpoch = p.epoch
	}
	body, err := req.MarshalBinary()
	if err != nil {
		return st, err
	}
	resp, err := p.do(ctx, http.MethodPost, "/sync", bytes.NewReader(body), nil)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	dec, release, err := p.codecs.decode(resp.Header.Get("Content-Encoding"), resp.Body)
	if err != nil {
		return st, err
	}
	defer release()
	if p.buf == nil {
		p.buf = bufio.NewReaderSize(dec, 32<<10)
	} else {
		p.buf.Reset(dec)
	}
	defer p.buf.Reset(nil)
	// Reuse: a frame is looked at once, in apply, which copies what it
	// keeps (the epoch, the bootstrap state) out of it.
	d := wire.NewDecoder(p.buf, wire.DecoderOptions{Kind: wire.KindResponse, MaxFrameBytes: 256 << 20, Reuse: true})
	if _, _, err := d.Header(); err != nil {
		return st, err
	}
	for {
		f, err := d.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return st, err
		}
		if err := p.apply(ctx, f, &st); err != nil {
			return st, err
		}
	}
	return st, nil
}

func (p *puller) apply(ctx context.Context, f wire.Frame, st *pullStats) error {
	switch f := f.(type) {
	case *wire.RespHeader:
		if f.ResetRequired && p.r.cfg.Wire >= wire.Version2 {
			if p.epoch != nil && *p.epoch != f.LogEpoch {
				p.sub.Cursor, p.sub.BootstrapState = -1, nil
			}
			e := strings.Clone(f.LogEpoch)
			p.epoch, st.epoch = &e, true
		}
	case *wire.Commit:
		st.commits++
		st.changes += len(f.Changes)
	case *wire.SegmentInline:
		return p.segment(f.Payload, st)
	case *wire.SegmentRef:
		st.refs++
		rows := f.MediaType == wire.MediaRows
		var (
			n   int
			err error
		)
		if f.URL != nil {
			st.urls++
			n, err = p.fetchURL(ctx, *f.URL, f.URLExpiresAtMs, f.SegmentID, rows)
		} else {
			n, err = p.download(ctx, f.SegmentID, rows)
		}
		if err != nil {
			return err
		}
		st.segments++
		if !rows {
			st.rows += int(f.RowCount)
			st.images++
			return nil
		}
		st.rows += n
	case *wire.SubEnd:
		p.sub.Cursor, p.sub.BootstrapState = f.NextCursor, cloneOpt(f.BootstrapState)
		st.pending = f.BootstrapState != nil
		if p.resetting {
			p.sub.Cursor, p.sub.BootstrapState, p.resetting, st.reset = -1, nil, false, true
		}
	case *wire.SubStart:
		if f.Status == wire.SubReset && p.allowReset {
			p.resetting = true
			return nil
		}
		if f.Status != wire.SubActive {
			return fmt.Errorf("subscription %s", f.Status)
		}
	case *wire.ErrorFrame:
		return fmt.Errorf("ERROR frame %s: %s", f.Code, f.Message)
	}
	return nil
}

// cloneOpt copies an optional string out of a reused frame.
func cloneOpt(s *string) *string {
	if s == nil {
		return nil
	}
	c := strings.Clone(*s)
	return &c
}

func (p *puller) segment(b []byte, st *pullStats) error {
	seg, err := wire.DecodeSegment(b)
	if err != nil {
		return err
	}
	for _, block := range seg.Blocks {
		st.rows += len(block)
	}
	st.segments++
	return nil
}

// download fetches a segment from the direct endpoint (§5.5) and checks
// it (checkSegment): the row count of a rows segment.
func (p *puller) download(ctx context.Context, id string, rows bool) (int, error) {
	scopes := string(wire.CanonicalScopeJSON(map[string][]string{p.r.gen.variable: {p.r.cfg.Scope}}))
	resp, err := p.do(ctx, http.MethodGet, "/segments/"+url.PathEscape(id), nil, http.Header{"X-Syncular-Scopes": {scopes}})
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return p.checkSegment(resp.Header.Get("Content-Encoding"), id, resp.Body, rows)
}

// fetchURL fetches a segment from its signed URL (§5.4): never past its
// expiry, with no credentials, and checks it (checkSegment).
func (p *puller) fetchURL(ctx context.Context, u string, expiresAtMs int64, id string, rows bool) (int, error) {
	if time.Now().UnixMilli() >= expiresAtMs {
		return 0, fmt.Errorf("segment %s: its signed URL expired before the fetch", id)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept-Encoding", p.r.cfg.AcceptEncoding)
	resp, err := p.r.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("segment %s: signed URL: HTTP %d", id, resp.StatusCode)
	}
	return p.checkSegment(resp.Header.Get("Content-Encoding"), id, resp.Body, rows)
}

func (p *puller) do(ctx context.Context, method, path string, body io.Reader, extra http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, p.r.base+path, body)
	if err != nil {
		return nil, err
	}
	for k, vs := range p.header {
		req.Header[k] = vs
	}
	for k, vs := range extra {
		req.Header[k] = vs
	}
	if body != nil {
		req.Header.Set("Content-Type", sspclient.ContentType)
	}
	req.Header.Set("Accept-Encoding", p.r.cfg.AcceptEncoding)
	resp, err := p.r.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		return nil, fmt.Errorf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return resp, nil
}

// bodyDecoders undo a response's Content-Encoding with decoders kept
// from one response to the next (one response at a time).
type bodyDecoders struct {
	zstd *zstd.Decoder
	gzip *gzip.Reader
}

// decode returns the decoded body of a response with Content-Encoding
// enc, and the function that detaches the decoder when the body is read.
func (b *bodyDecoders) decode(enc string, r io.Reader) (io.Reader, func(), error) {
	switch strings.ToLower(strings.TrimSpace(enc)) {
	case "", "identity":
		return r, func() {}, nil
	case "gzip":
		if b.gzip == nil {
			gz, err := gzip.NewReader(r)
			if err != nil {
				return nil, nil, err
			}
			b.gzip = gz
		} else if err := b.gzip.Reset(r); err != nil {
			return nil, nil, err
		}
		return b.gzip, func() { _ = b.gzip.Close() }, nil
	case "zstd":
		if b.zstd == nil {
			zd, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
			if err != nil {
				return nil, nil, err
			}
			b.zstd = zd
		}
		if err := b.zstd.Reset(r); err != nil {
			return nil, nil, err
		}
		return b.zstd, func() { _ = b.zstd.Reset(nil) }, nil
	}
	return nil, nil, fmt.Errorf("unsupported Content-Encoding %q", enc)
}
