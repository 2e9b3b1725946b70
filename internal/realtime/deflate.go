package realtime

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gobwas/httphead"
	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsflate"
	"github.com/klauspost/compress/flate"
)

// The permessage-deflate extension (RFC 7692) is negotiated without
// context takeover in either direction: each message is compressed and
// inflated on its own, so a socket keeps no compressor, inflater or
// window between messages (an idle socket holds nothing for it), and a
// message compressed once is the same bytes for every socket that
// negotiated the extension (a delta fanned out is compressed once).

// deflateMin is the smallest payload compressed: shorter messages (acks,
// heartbeats, most wake-ups) gain nothing worth the work.
const deflateMin = 128

// deflateTail ends a sync flush: RFC 7692 §7.2.1 strips it from each
// compressed message, §7.2.2 has the receiver append it back.
const deflateTail = "\x00\x00\xff\xff"

// inflateEnd is what inflate appends to a compressed message: the tail,
// then an empty final stored block, so that a message that ends where a
// block ends inflates to a clean end of stream, and one cut inside a
// block does not (it fails instead of passing for what it held so far).
const inflateEnd = deflateTail + "\x01\x00\x00\xff\xff"

// rsv1 is the per-message compressed bit (RFC 7692 §6) of ws.Header.Rsv
// (ws.Rsv(true, false, false)).
const rsv1 byte = 0x04

// codec compresses and inflates messages with pooled state, for every
// socket of a hub.
type codec struct {
	writers sync.Pool // *flate.Writer
	readers sync.Pool // io.ReadCloser that is a flate.Resetter
	// compressed counts the messages compressed (once per message,
	// whatever the number of sockets it goes to).
	compressed atomic.Int64
}

// compress returns the frame of payload compressed, RSV1 set, or nil when
// the payload is too short or compression does not make it smaller.
func (z *codec) compress(op ws.OpCode, payload []byte) []byte {
	if len(payload) < deflateMin {
		return nil
	}
	const room = ws.MaxHeaderSize - 4 // the longest server frame header
	out := &sliceWriter{b: make([]byte, room, room+len(payload)/2+64)}
	w, _ := z.writers.Get().(*flate.Writer)
	if w == nil {
		w, _ = flate.NewWriter(out, flate.BestSpeed) // a valid level: no error
	} else {
		w.Reset(out)
	}
	_, err := w.Write(payload)
	if err == nil {
		err = w.Flush()
	}
	w.Reset(nil) // the pool keeps no reference to out
	z.writers.Put(w)
	body := out.b[room:]
	if err != nil || !bytes.HasSuffix(body, []byte(deflateTail)) {
		return nil
	}
	body = body[:len(body)-len(deflateTail)]
	if len(body) >= len(payload) {
		return nil
	}
	h := ws.Header{Fin: true, Rsv: rsv1, OpCode: op, Length: int64(len(body))}
	start := room - ws.HeaderSize(h)
	hdr := &sliceWriter{b: out.b[start:start]}
	_ = ws.WriteHeader(hdr, h)
	z.compressed.Add(1)
	return out.b[start : room+len(body)]
}

// errInflate marks a compressed message that does not inflate.
var errInflate = errors.New("compressed message does not inflate")

// inflate returns the payload of the compressed message c. A payload over
// maxBytes fails with errTooLarge having read at most max+1 bytes of it: a
// small message that inflates to gigabytes holds no more than an
// uncompressed message may. reserve is asked, before the payload's buffer
// grows to n bytes, whether it may (false fails with errBodyBudget).
func (z *codec) inflate(c []byte, maxBytes int64, reserve func(n int64) bool) ([]byte, error) {
	src := io.MultiReader(bytes.NewReader(c), strings.NewReader(inflateEnd))
	r, _ := z.readers.Get().(io.ReadCloser)
	if r == nil {
		r = flate.NewReader(src)
	} else if err := r.(flate.Resetter).Reset(src, nil); err != nil {
		return nil, errInflate
	}
	defer func() {
		_ = r.(flate.Resetter).Reset(strings.NewReader(""), nil) // no reference to c
		z.readers.Put(r)
	}()
	limit := maxBytes + 1
	size := min(int64(4*len(c)+512), limit)
	if !reserve(size) {
		return nil, errBodyBudget
	}
	p := make([]byte, 0, size)
	for {
		if len(p) == cap(p) {
			if int64(len(p)) >= limit {
				return nil, errTooLarge
			}
			size := min(2*int64(cap(p)), limit)
			if !reserve(size) {
				return nil, errBodyBudget
			}
			grown := make([]byte, len(p), size)
			copy(grown, p)
			p = grown
		}
		n, err := r.Read(p[len(p):cap(p)])
		p = p[:len(p)+n]
		switch {
		case err == nil:
		case err == io.EOF:
			// The final block: the one inflateEnd adds, or the
			// client's own.
			if int64(len(p)) > maxBytes {
				return nil, errTooLarge
			}
			return p, nil
		default:
			return nil, errInflate
		}
	}
}

// NegotiateDeflate returns a ws.HTTPUpgrader Negotiate function for
// permessage-deflate: the first of a client's offers (in its order of
// preference, RFC 7692 §5) that it can honour is answered with no context
// takeover in both directions, and *accepted set; none, no extension. An
// upgrade needs a fresh one.
func NegotiateDeflate(accepted *bool) func(httphead.Option) (httphead.Option, error) {
	return func(opt httphead.Option) (httphead.Option, error) {
		if *accepted || !bytes.Equal(opt.Name, wsflate.ExtensionNameBytes) {
			return httphead.Option{}, nil
		}
		var offer wsflate.Parameters
		if offer.Parse(opt) != nil {
			return httphead.Option{}, nil // a malformed offer is declined, not the handshake
		}
		resp := wsflate.Parameters{ServerNoContextTakeover: true, ClientNoContextTakeover: true}
		if offer.ServerMaxWindowBits.Defined() {
			// The compressor refers back up to 32 KiB (15 bits): a
			// smaller window asked of it cannot be honoured. Accepting
			// the parameter means echoing it (§7.1.2.1).
			if offer.ServerMaxWindowBits < 15 {
				return httphead.Option{}, nil
			}
			resp.ServerMaxWindowBits = offer.ServerMaxWindowBits
		}
		// client_max_window_bits needs no answer: the inflater takes any
		// window up to 32 KiB, the most a client may use.
		*accepted = true
		return resp.Option(), nil
	}
}

// payloadOf returns the payload of a server frame (unmasked) b.
func payloadOf(b []byte) []byte {
	switch n := b[1] & 0x7f; n {
	case 126:
		return b[4:]
	case 127:
		return b[10:]
	default:
		return b[2:]
	}
}

// ExtensionsParse reports whether the Sec-WebSocket-Extensions header
// values parse. The upgrader fails a handshake whose header does not,
// once it negotiates extensions; a server that negotiated none accepted
// such a handshake, and still does: it negotiates nothing for it.
func ExtensionsParse(values []string) bool {
	for _, v := range values {
		if _, ok := httphead.ParseOptions([]byte(v), nil); !ok {
			return false
		}
	}
	return true
}

// Deflate compresses and inflates permessage-deflate messages with a
// hub's pooled compressors and inflaters, for the server's other sockets
// (the watch sockets of /operations/realtime): one implementation, and
// the hub's Compressed count covers their messages too.
type Deflate struct{ z *codec }

// Deflate returns the hub's codec.
func (h *Hub) Deflate() Deflate { return Deflate{z: &h.z} }

// Frame returns a whole server frame (final, unmasked, RSV1 set) holding
// payload compressed, or nil when it is to go as it is: under 128 bytes,
// or no smaller compressed.
func (d Deflate) Frame(op ws.OpCode, payload []byte) []byte {
	return d.z.compress(op, payload)
}

// Inflate returns the payload of a compressed client message c (its
// frames' payloads joined, RFC 7692 §7.2.2), bounded by maxBytes as an
// uncompressed message is: a message inflating past it fails having held
// at most maxBytes+1 bytes. reserve is asked, before the payload's buffer
// grows to n bytes in all, whether it may (nil: always). On failure it
// returns the status code to close the socket with: 1009 (too large),
// 1013 (reserve refused: try again later) or 1002 (not deflate data).
func (d Deflate) Inflate(c []byte, maxBytes int64, reserve func(n int64) bool) ([]byte, ws.StatusCode, error) {
	if reserve == nil {
		reserve = func(int64) bool { return true }
	}
	p, err := d.z.inflate(c, maxBytes, reserve)
	switch {
	case err == nil:
		return p, 0, nil
	case errors.Is(err, errTooLarge):
		return nil, ws.StatusMessageTooBig, err
	case errors.Is(err, errBodyBudget):
		return nil, statusTryAgainLater, err
	default:
		return nil, ws.StatusProtocolError, err
	}
}
