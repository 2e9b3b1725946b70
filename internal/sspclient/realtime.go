package sspclient

import (
	"bufio"
	"compress/flate"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/gobwas/httphead"
	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsflate"
	"github.com/gobwas/ws/wsutil"

	"github.com/syncgo/syncgo/wire"
)

// Realtime is a connection of the client to the realtime channel (§8):
// GET <base>/realtime?clientId=… upgraded to a WebSocket. Next reads one
// message at a time and must not be called concurrently; Ack and Close
// may be called from any goroutine.
type Realtime struct {
	c    *Client
	conn net.Conn
	rw   io.ReadWriter
	br   *bufio.Reader
	wmu  sync.Mutex
	// Hello is the handshake event the server sent on connect (§8.1).
	Hello wire.Hello
	// Deflate: the server accepted permessage-deflate (Options.RealtimeDeflate).
	Deflate bool
}

// RealtimeMessage is one message of the realtime channel: a JSON control
// event, a delta (a 0x00-tagged SSP2 response, §8.2) or a chunk of a
// socket round (0x01, §8.7).
type RealtimeMessage struct {
	// Event is the control event, nil for a binary message.
	Event wire.ServerEvent
	// Delta is the SSP2 response of a delta, without its channel tag.
	Delta []byte
	// RoundChunk is a chunk of a socket round's response stream.
	RoundChunk []byte
}

// DialRealtime connects the client to the realtime channel and reads the
// hello event. The request carries the client's bearer token, when it has
// one, and header; the realtime URL is the client's base URL with its
// scheme mapped to ws or wss.
func (c *Client) DialRealtime(ctx context.Context, header http.Header) (*Realtime, error) {
	u, err := url.Parse(c.base + "/realtime")
	if err != nil {
		return nil, fmt.Errorf("sspclient: realtime URL: %w", err)
	}
	switch u.Scheme {
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	}
	u.RawQuery = url.Values{"clientId": {c.opts.ClientID}}.Encode()
	h := http.Header{}
	for k, vs := range header {
		h[k] = append([]string(nil), vs...)
	}
	if c.token != "" && h.Get("Authorization") == "" {
		h.Set("Authorization", "Bearer "+c.token)
	}
	d := ws.Dialer{Header: ws.HandshakeHeaderHTTP(h), NetDial: c.opts.RealtimeNetDial}
	if c.opts.RealtimeDeflate {
		// Chrome's offer: permessage-deflate; client_max_window_bits.
		d.Extensions = []httphead.Option{wsflate.Parameters{ClientMaxWindowBits: 1}.Option()}
	}
	conn, br, hs, err := d.Dial(ctx, u.String())
	if err != nil {
		return nil, fmt.Errorf("sspclient: realtime dial: %w", err)
	}
	var r io.Reader = conn
	if br != nil {
		r = br // holds bytes read past the handshake; keeps reading conn
	}
	rt := &Realtime{c: c, conn: conn, br: bufio.NewReader(r)}
	for _, x := range hs.Extensions {
		if string(x.Name) == wsflate.ExtensionName {
			rt.Deflate = true
		}
	}
	rt.rw = struct {
		io.Reader
		io.Writer
	}{rt.br, lockedWriter{rt}}
	m, err := rt.Next()
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	hello, ok := m.Event.(wire.Hello)
	if !ok {
		_ = conn.Close()
		return nil, fmt.Errorf("sspclient: realtime: first message is not hello")
	}
	rt.Hello = hello
	// The server counts its deltas from the latest cursor at connect,
	// trusting its client record (hello's cursor), which can be ahead of
	// a subscription: a server that records the cursors a pull answered
	// (the reference) after that answer was lost, or acks that did not
	// cover a subscription added since the last connect. Deltas are
	// refused until every subscription has pulled to the latest cursor,
	// as after a dropped delta.
	c.mu.Lock()
	c.droppedMark = max(c.droppedMark, hello.LatestCursor)
	c.mu.Unlock()
	return rt, nil
}

// lockedWriter serializes writes to the connection: acks and the control
// frames the reader answers (pong, close).
type lockedWriter struct{ rt *Realtime }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.rt.wmu.Lock()
	defer w.rt.wmu.Unlock()
	return w.rt.conn.Write(p)
}

// Next reads the next data message. A close from the server ends the
// connection with an error (a wsutil.ClosedError for a close frame).
func (rt *Realtime) Next() (RealtimeMessage, error) {
	b, op, err := rt.readData()
	if err != nil {
		return RealtimeMessage{}, err
	}
	if op == ws.OpText {
		ev, err := wire.ParseServerEvent(b)
		if err != nil {
			return RealtimeMessage{}, fmt.Errorf("sspclient: realtime event: %w", err)
		}
		return RealtimeMessage{Event: ev}, nil
	}
	if len(b) == 0 {
		return RealtimeMessage{}, errors.New("sspclient: realtime: empty binary message")
	}
	switch b[0] {
	case wire.ChannelTagDelta:
		return RealtimeMessage{Delta: b[1:]}, nil
	case wire.ChannelTagRound:
		return RealtimeMessage{RoundChunk: b[1:]}, nil
	}
	return RealtimeMessage{}, fmt.Errorf("sspclient: realtime: unknown channel tag 0x%02x", b[0])
}

// Buffered reports how many bytes were read from the connection past the
// messages Next returned. A caller that takes the reading of the
// connection over (a reader of its own, parsing the server's frames
// itself) may do so only when it is 0; Next must not be called after
// that, while Ack, Pong, Close and Drop still may.
func (rt *Realtime) Buffered() int { return rt.br.Buffered() }

// Pong answers a ping from the server with its payload (RFC 6455 §5.5.3),
// for a caller that reads the connection itself (see Buffered).
func (rt *Realtime) Pong(payload []byte) error {
	return wsutil.WriteClientMessage(lockedWriter{rt}, ws.OpPong, payload)
}

// Ack sends {"type":"ack","cursor":cursor} (§8.2).
// The frame is written by one write (one TCP segment), as browsers do,
// not its header and payload apart.
func (rt *Realtime) Ack(cursor int64) error {
	b, err := ws.CompileFrame(ws.MaskFrame(ws.NewTextFrame(wire.Ack{Cursor: cursor}.AppendJSON(nil))))
	if err != nil {
		return err
	}
	_, err = lockedWriter{rt}.Write(b)
	return err
}

// Close sends a normal-closure close frame, best effort, and closes the
// connection.
func (rt *Realtime) Close() error {
	_ = wsutil.WriteClientMessage(lockedWriter{rt}, ws.OpClose, ws.NewCloseFrameBody(ws.StatusNormalClosure, ""))
	return rt.conn.Close()
}

// Drop closes the connection without a close frame, like a lost network.
func (rt *Realtime) Drop() error { return rt.conn.Close() }

// ErrDeltaDropped is what every error of ApplyDelta that leaves a delta
// unapplied wraps: the caller must treat it as a wake-up and pull (§8.2).
var ErrDeltaDropped = errors.New("sspclient: delta not applied")

// ErrRoundInFlight is returned by ApplyDelta while a round runs: the delta
// is not applied, and the caller must treat it as a wake-up (§8.2).
var ErrRoundInFlight = fmt.Errorf("%w: a round is in flight", ErrDeltaDropped)

// ErrCatchingUp is returned by ApplyDelta after a delta was dropped and
// before the pulls since reached it: a server without a replay buffer
// never resends the dropped one, and a later delta would apply over the
// gap (§8.2). A round limited by limitCommits can leave a subscription
// short of the dropped delta; the caller pulls again. The same holds
// after a connect until the pulls reach hello's latestCursor.
var ErrCatchingUp = fmt.Errorf("%w: the pulls since an earlier dropped delta have not reached it", ErrDeltaDropped)

// ApplyDelta applies a delta (§8.2) like a pull response: per section,
// only to a subscription that is active, has synced at least once and has
// no bootstrap pending, and only when its nextCursor advances the
// subscription's cursor (an older or equal one is a duplicate). It
// returns the highest nextCursor applied, or -1 when nothing applied. A
// delta of another log epoch applies nothing, and so does one that does
// not decode whole (a corrupt or cut-short message, a row the codec
// refuses, an ERROR frame): it is decoded to its end before any section
// applies.
func (c *Client) ApplyDelta(payload []byte) (int64, error) {
	if !c.roundMu.TryLock() {
		c.markDropped(payload)
		return -1, ErrRoundInFlight
	}
	defer c.roundMu.Unlock()
	if c.behindDropped() {
		c.markDropped(payload)
		return -1, ErrCatchingUp
	}
	d := wire.NewBytesDecoder(payload, wire.DecoderOptions{Kind: wire.KindResponse})
	if _, _, err := d.Header(); err != nil {
		return -1, fmt.Errorf("sspclient: delta: %w", err)
	}
	type staged struct {
		table  string
		seq    int64
		row    Row
		del    bool
		scopes wire.StoredScopes
	}
	// section is a subscription's part of the delta, applied once the
	// whole message decoded: a delta whose later bytes are corrupt or cut
	// short applies nothing.
	type section struct {
		sub     *subscription
		next    int64
		changes []staged
	}
	var (
		open     *subscription
		changes  []staged
		sections []section
	)
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		f, err := d.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return -1, fmt.Errorf("sspclient: delta: %w", err)
		}
		switch f := f.(type) {
		case *wire.RespHeader:
			if c.opts.WireVersion >= wire.Version2 && (c.logEpoch == nil || *c.logEpoch != f.LogEpoch) {
				return -1, nil
			}
		case *wire.SubStart:
			open, changes = nil, nil
			if s := c.sub(f.ID); s != nil && f.Status == wire.SubActive && s.status == wire.SubActive &&
				s.cursor >= 0 && s.bootstrapState == nil {
				open = s
			}
		case *wire.Commit:
			if open == nil {
				continue
			}
			for _, ch := range f.Changes {
				name := f.Tables[ch.TableIndex]
				st := staged{table: name, seq: f.CommitSeq, row: Row{ID: ch.RowID, Version: ch.RowVersion}, del: ch.Op == wire.OpDelete, scopes: ch.Scopes}
				if !st.del {
					t, ok := c.schema.Table(name)
					if !ok {
						return -1, fmt.Errorf("sspclient: delta changes unknown table %q", name)
					}
					if st.row.Values, err = t.RowCodec().DecodeRow(ch.Row); err != nil {
						return -1, fmt.Errorf("sspclient: delta row %s: %w", ch.RowID, err)
					}
				}
				changes = append(changes, st)
			}
		case *wire.SubEnd:
			if open != nil {
				sections = append(sections, section{sub: open, next: f.NextCursor, changes: changes})
			}
			open, changes = nil, nil
		case *wire.ErrorFrame:
			return -1, fmt.Errorf("sspclient: delta carries an error: %s", f.Code)
		}
	}
	applied := int64(-1)
	for _, sec := range sections {
		// In order, as at each SUB_END: a later section of the same
		// subscription is compared with the cursor the earlier one set.
		if sec.next <= sec.sub.cursor {
			continue
		}
		for _, ch := range sec.changes {
			c.applyChange(ch.table, ch.seq, ch.row, ch.del, ch.scopes)
		}
		sec.sub.cursor = sec.next
		applied = max(applied, sec.next)
	}
	return applied, nil
}

// AckFloor returns the ack point after a pull round (§8.2): the minimum
// cursor across the active subscriptions without a pending bootstrap that
// have synced at least once, and false when there is none.
func (c *Client) AckFloor() (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	floor, ok := int64(0), false
	for _, s := range c.subs {
		if s.status != wire.SubActive || s.bootstrapState != nil || s.cursor < 0 {
			continue
		}
		if !ok || s.cursor < floor {
			floor, ok = s.cursor, true
		}
	}
	return floor, ok
}

// markDropped records the highest SUB_END.nextCursor of a delta that was
// not applied: until every subscription that applies deltas has pulled
// to it, later deltas are refused (behindDropped). A delta that does not
// decode, or of another log epoch, marks nothing: applying it would fail
// or apply nothing.
func (c *Client) markDropped(payload []byte) {
	d := wire.NewBytesDecoder(payload, wire.DecoderOptions{Kind: wire.KindResponse})
	if _, _, err := d.Header(); err != nil {
		return
	}
	mark := int64(-1)
	var epoch *string
	for {
		f, err := d.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *wire.RespHeader:
			epoch = &f.LogEpoch
		case *wire.SubEnd:
			mark = max(mark, f.NextCursor)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.opts.WireVersion >= wire.Version2 && (epoch == nil || c.logEpoch == nil || *c.logEpoch != *epoch) {
		return // another log's delta applies nothing anyway
	}
	c.droppedMark = max(c.droppedMark, mark)
}

// behindDropped reports whether a subscription that applies deltas is
// still short of the highest dropped delta.
func (c *Client) behindDropped() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.subs {
		if s.status == wire.SubActive && s.cursor >= 0 && s.bootstrapState == nil && s.cursor < c.droppedMark {
			return true
		}
	}
	return false
}

// readData reads the next data message, answering control frames; a
// compressed one (RSV1, on a connection that negotiated
// permessage-deflate) is inflated.
func (rt *Realtime) readData() ([]byte, ws.OpCode, error) {
	if !rt.Deflate {
		return wsutil.ReadServerData(rt.rw)
	}
	var state wsflate.MessageState
	r := &wsutil.Reader{Source: rt.rw, State: ws.StateClientSide | ws.StateExtended,
		Extensions:     []wsutil.RecvExtension{&state},
		OnIntermediate: wsutil.ControlFrameHandler(rt.rw, ws.StateClientSide)}
	for {
		h, err := r.NextFrame()
		if err != nil {
			return nil, 0, err
		}
		if h.OpCode.IsControl() {
			if err := r.OnIntermediate(h, r); err != nil {
				return nil, 0, err
			}
			continue
		}
		var src io.Reader = r
		if state.IsCompressed() {
			src = flate.NewReader(io.MultiReader(r, strings.NewReader("\x00\x00\xff\xff\x01\x00\x00\xff\xff")))
		}
		b, err := io.ReadAll(src)
		if err != nil {
			return nil, 0, err
		}
		return b, h.OpCode, nil
	}
}
