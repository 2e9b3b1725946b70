package wire

import (
	"bytes"
	"io"
)

// Message is a whole SSP2 message: its version, kind and frames in wire
// order, END excluded. Unknown frames stay in place as *Unknown, so
// encoding a decoded message reproduces its bytes.
type Message struct {
	Version uint16
	Kind    MsgKind
	Frames  []Frame
}

// DecodeMessage decodes a whole message from b. The frames alias b.
func DecodeMessage(b []byte, opts DecoderOptions) (*Message, error) {
	return readMessage(NewBytesDecoder(b, opts))
}

// ReadMessage decodes a whole message from r.
func ReadMessage(r io.Reader, opts DecoderOptions) (*Message, error) {
	return readMessage(NewDecoder(r, opts))
}

func readMessage(d *Decoder) (*Message, error) {
	v, k, err := d.Header()
	if err != nil {
		return nil, err
	}
	m := &Message{Version: v, Kind: k}
	for {
		f, err := d.Next()
		if err == io.EOF {
			return m, nil
		}
		if err != nil {
			return nil, err
		}
		m.Frames = append(m.Frames, f)
	}
}

// WriteTo encodes the message to w.
func (m *Message) WriteTo(w io.Writer) (int64, error) {
	cw := &countingWriter{w: w}
	e, err := NewEncoder(cw, m.Kind, m.Version)
	if err != nil {
		return 0, err
	}
	for _, f := range m.Frames {
		if err := e.Encode(f); err != nil {
			return cw.n, err
		}
	}
	err = e.Close()
	return cw.n, err
}

// MarshalBinary encodes the message.
func (m *Message) MarshalBinary() ([]byte, error) {
	var buf bytes.Buffer
	if _, err := m.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Request is a decoded request in the shape a server uses: the header, the
// push commits in order, the pull header if any and the subscriptions.
// Unknown frames are skipped.
type Request struct {
	Version       uint16
	Header        *ReqHeader
	Commits       []*PushCommit
	Pull          *PullHeader
	Subscriptions []*Subscription
}

// DecodeRequest decodes a request message from b; the result aliases b.
func DecodeRequest(b []byte, opts DecoderOptions) (*Request, error) {
	opts.Kind = KindRequest
	return readRequest(NewBytesDecoder(b, opts))
}

// ReadRequest decodes a request message from r frame by frame.
func ReadRequest(r io.Reader, opts DecoderOptions) (*Request, error) {
	opts.Kind = KindRequest
	return readRequest(NewDecoder(r, opts))
}

func readRequest(d *Decoder) (*Request, error) {
	v, _, err := d.Header()
	if err != nil {
		return nil, err
	}
	req := &Request{Version: v}
	for {
		f, err := d.Next()
		if err == io.EOF {
			return req, nil
		}
		if err != nil {
			return nil, err
		}
		switch f := f.(type) {
		case *ReqHeader:
			req.Header = f
		case *PushCommit:
			req.Commits = append(req.Commits, f)
		case *PullHeader:
			req.Pull = f
		case *Subscription:
			req.Subscriptions = append(req.Subscriptions, f)
		}
	}
}

// Message returns the request as a Message, in grammar order.
func (r *Request) Message() *Message {
	m := &Message{Version: r.Version, Kind: KindRequest}
	m.Frames = append(m.Frames, r.Header)
	for _, c := range r.Commits {
		m.Frames = append(m.Frames, c)
	}
	if r.Pull != nil {
		m.Frames = append(m.Frames, r.Pull)
		for _, s := range r.Subscriptions {
			m.Frames = append(m.Frames, s)
		}
	}
	return m
}

// MarshalBinary encodes the request.
func (r *Request) MarshalBinary() ([]byte, error) { return r.Message().MarshalBinary() }
