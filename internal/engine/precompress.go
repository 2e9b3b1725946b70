package engine

import (
	"bytes"
	"errors"
	"io"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// A catch-up's window read ahead (readahead.go) is also encoded and
// compressed ahead: the response body the client's next request would
// get, built from the window read for it, while the client still decodes
// the response before. The request that takes the window then writes
// that body instead of encoding and compressing the window's frames.
//
// The body is the whole response message, predicted: the envelope,
// RESP_HEADER, SUB_START, the window's COMMIT frames, SUB_END and END,
// compressed as one stream in the response's content coding. Only the
// frames around the commits depend on the request, and the request checks
// them byte for byte: it encodes its RESP_HEADER (and LEASE, if any) and
// SUB_START as usual, and the body is used only when those buffered bytes
// (nothing written yet) equal the body's prefix, its SUB_END's cursor is
// the body's, it speaks the schema version the body was encoded for, and
// its response goes out in the body's coding. Anything else (a lease
// issued, another subscription id, effective scopes or epoch, a narrower
// client schema, another coding, a response already flushed) encodes the
// window as before. The window itself passed every check of take and of
// the section (scopes, epoch, bound, horizon) before its body is
// considered, and the body is released through the serve gate's
// read-verify like any first chunk; so what a client receives is byte for
// byte what the request would have encoded, compressed ahead.
//
// The request sends the body only at its end, after its client record
// was saved: a failure before that answers without it (the encoder's
// buffered frames are discarded, nothing of the section was sent).

// BodyResponder is a StreamResponder that can also send a response body
// that is already in the response's content coding.
type BodyResponder interface {
	StreamResponder
	// BodyEncoding is the content coding a response body sent by
	// BeginEncoded must be in; "" when the transport does not take
	// coded bodies for this response.
	BodyEncoding() string
	// BeginEncoded commits the transport to a response whose body,
	// written to the returned writer, is already coded in BodyEncoding.
	BeginEncoded(version uint16) (io.Writer, error)
}

// preBodyMaxBytes bounds the compressed body kept with a window read
// ahead: a larger one is not kept, and the request encodes the window.
// With maxReadAheads windows at once, the bodies hold at most 8 MiB.
const preBodyMaxBytes = 1 << 20

// preSpec is what a body compressed ahead is built for: the request that
// started the read-ahead, whose next request is expected to repeat it.
type preSpec struct {
	encoding string
	version  uint16
	cs       *schema.Compiled // the client's schema version
	subID    string
	served   int32  // RESP_HEADER.latestSchemaVersion
	logEpoch string // RESP_HEADER.logEpoch
	compress func(encoding string, raw []byte) ([]byte, bool)
	current  *schema.Compiled
}

// same reports whether bodies built for p and for o are built alike (both
// nil: none is built).
func (p *preSpec) same(o *preSpec) bool {
	if p == nil || o == nil {
		return p == o
	}
	return p.encoding == o.encoding && p.version == o.version && p.cs == o.cs && p.subID == o.subID &&
		p.served == o.served && p.logEpoch == o.logEpoch && p.current == o.current
}

// preBody is a window's response, encoded and compressed ahead.
type preBody struct {
	encoding string
	cs       *schema.Compiled
	// prefix is the message up to SUB_START included, suffix SUB_END and
	// END, both uncompressed; body is the whole message compressed.
	prefix, suffix []byte
	next           int64
	body           []byte
}

// windowNext is a section's next cursor for window w of query q, read
// with the partition's high-water mark at q.ThroughSeq.
func windowNext(w store.CommitWindow, q store.CommitWindowQuery) int64 {
	next := q.ThroughSeq
	if !w.Complete && len(w.Commits) > 0 {
		next = w.Commits[len(w.Commits)-1].Seq
	}
	return max(next, q.AfterSeq)
}

// encodeCommits writes a window's COMMIT frames. old is set when the
// client speaks an older schema than the current one: rows are narrowed
// to its layout.
func encodeCommits(enc *wire.Encoder, win store.CommitWindow, table string, client, current *schema.CompiledTable, old bool) error {
	// One frame and one change slice for the whole window: Encode
	// serializes a frame before it returns and keeps no reference to it.
	f := &wire.Commit{Tables: []string{table}}
	var changes []wire.Change
	enc.Grow(windowBytes(win))
	for _, c := range win.Commits {
		changes = changes[:0]
		for _, ch := range c.Changes {
			row := ch.Payload
			if row != nil && old {
				var err error
				if row, err = narrowPayload(current, client, row); err != nil {
					return err
				}
			}
			changes = append(changes, wire.Change{RowID: ch.RowID, Op: ch.Op, RowVersion: ch.RowVersion, Scopes: ch.Scopes, Row: row})
		}
		f.CommitSeq, f.CreatedAtMs, f.ActorID, f.Changes = c.Seq, c.CreatedAtMs, WireActorID(c.ActorID), changes
		if err := enc.Encode(f); err != nil {
			return err
		}
	}
	clear(changes)
	return nil
}

// windowBytes estimates a window's COMMIT frames as encoded: each
// change's row ID, payload and scopes with their lengths, and each
// commit's actor, sequence and time.
func windowBytes(win store.CommitWindow) int {
	n := 0
	for _, c := range win.Commits {
		n += 32 + len(c.ActorID)
		for _, ch := range c.Changes {
			n += 24 + len(ch.RowID) + len(ch.Payload)
			for _, sc := range ch.Scopes {
				n += 8 + len(sc.Key) + len(sc.Value)
			}
		}
	}
	return n
}

// build encodes and compresses the response of window w, read for q; nil
// when it cannot be kept (too large, not compressible by the transport,
// rows that do not narrow). buf is scratch for the uncompressed message.
func (s *preSpec) build(w store.CommitWindow, q store.CommitWindowQuery, buf *bytes.Buffer) *preBody {
	client, ok := s.cs.Table(q.Table)
	if !ok {
		return nil
	}
	current, ok := s.current.Table(q.Table)
	if !ok {
		return nil
	}
	buf.Reset()
	enc, err := wire.NewEncoder(buf, wire.KindResponse, s.version)
	if err != nil {
		return nil
	}
	served := s.served
	next := windowNext(w, q)
	var prefix, suffix int
	err = errors.Join(
		enc.Encode(&wire.RespHeader{LatestSchemaVersion: &served, LogEpoch: s.logEpoch}),
		enc.Encode(&wire.SubStart{ID: s.subID, Status: wire.SubActive, EffectiveScopes: q.Scopes}),
		enc.Flush())
	if err != nil {
		return nil
	}
	prefix = buf.Len()
	if err := encodeCommits(enc, w, q.Table, client, current, s.cs != s.current); err != nil {
		return nil
	}
	if err := enc.Flush(); err != nil {
		return nil
	}
	suffix = buf.Len()
	if err := errors.Join(enc.Encode(&wire.SubEnd{NextCursor: next}), enc.Close()); err != nil {
		return nil
	}
	raw := buf.Bytes()
	body, ok := s.compress(s.encoding, raw)
	if !ok || len(body) > preBodyMaxBytes {
		return nil
	}
	return &preBody{encoding: s.encoding, cs: s.cs, next: next, body: body,
		prefix: bytes.Clone(raw[:prefix]), suffix: bytes.Clone(raw[suffix:])}
}

// preSpecFor is the spec of the body of the window after a section of r
// for subscription subID, or nil when r's transport takes no coded
// bodies.
func (r *request) preSpecFor(subID string) *preSpec {
	br, ok := r.resp.(BodyResponder)
	if !ok || r.gw == nil || r.e.cfg.CompressBody == nil {
		return nil
	}
	enc := br.BodyEncoding()
	if enc == "" {
		return nil
	}
	return &preSpec{encoding: enc, version: r.req.Version, cs: r.cs, subID: subID,
		served: r.e.cfg.Schema.Version(), logEpoch: epochOf(r.req.Version, r.partition),
		compress: r.e.cfg.CompressBody, current: r.e.cfg.Schema}
}

// usable reports whether r may answer with body b for a section whose
// SUB_START it just encoded and whose next cursor is next.
func (r *request) usable(b *preBody, next int64) bool {
	if b == nil || b.cs != r.cs || b.next != next || r.gw == nil || r.gw.bypass {
		return false
	}
	br, ok := r.resp.(BodyResponder)
	if !ok || br.BodyEncoding() != b.encoding {
		return false
	}
	msg, ok := r.enc.Pending()
	return ok && bytes.Equal(msg, b.prefix)
}

// errPreBody marks a response whose frames, at its end, were not the
// prefix and suffix of the body compressed ahead it chose (a bug: it was
// checked when chosen). Nothing was sent.
var errPreBody = errors.New("engine: response does not match the body compressed ahead")

// close ends the response: the encoder's message, or the body compressed
// ahead when a section chose it, checked once more against the frames
// the request encoded around it (its SUB_END included).
func (r *request) close() error {
	b := r.preBody
	if b == nil {
		return r.enc.Close()
	}
	msg, ok, err := r.enc.Detach()
	if err != nil {
		return err
	}
	if !ok || len(msg) != len(b.prefix)+len(b.suffix) ||
		!bytes.Equal(msg[:len(b.prefix)], b.prefix) || !bytes.Equal(msg[len(b.prefix):], b.suffix) {
		return errPreBody
	}
	return r.gw.writeEncoded(b.body)
}
