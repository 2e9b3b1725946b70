package wire

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// rawMessage assembles a message from frames given as (type, payload)
// without any checks, to feed the decoder sequences an encoder refuses.
func rawMessage(version uint16, kind MsgKind, frames ...rawFrame) []byte {
	b := []byte("SSP2")
	b = binary.LittleEndian.AppendUint16(b, version)
	b = append(b, byte(kind), 0)
	for _, f := range frames {
		b = append(b, byte(f.t))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(f.p)))
		b = append(b, f.p...)
	}
	return append(b, 0, 0, 0, 0, 0)
}

type rawFrame struct {
	t FrameType
	p []byte
}

// frameBytes encodes one frame's payload with the real encoder logic.
func frameBytes(t *testing.T, f Frame, version uint16) rawFrame {
	t.Helper()
	var w writer
	f.appendPayload(&w, version)
	if w.err != nil {
		t.Fatalf("payload of %s: %v", f.Type().Name(), w.err)
	}
	return rawFrame{f.Type(), w.b}
}

func TestResponseGrammar(t *testing.T) {
	v := Version3
	hdr := frameBytes(t, &RespHeader{LogEpoch: "e"}, v)
	lease := frameBytes(t, &Lease{LeaseID: "l", ExpiresAtMs: 1}, v)
	applied := frameBytes(t, &PushResult{ClientCommitID: "c1", Status: PushApplied, CommitSeq: 1}, v)
	rejected := frameBytes(t, &PushResult{ClientCommitID: "c1", Status: PushRejected,
		Results: []OpResult{{OpIndex: 0, Status: OpError, Code: "x", Message: "m"}}}, v)
	details := frameBytes(t, &PushResultDetails{ClientCommitID: "c1",
		Entries: []DetailEntry{{OpIndex: 0, DetailsJSON: `{"reason":"too_long"}`}}}, v)
	subStart := frameBytes(t, &SubStart{ID: "s", Status: SubActive}, v)
	commit := frameBytes(t, &Commit{CommitSeq: 1, Tables: []string{"t"},
		Changes: []Change{{RowID: "r", Op: OpDelete}}}, v)
	ref := frameBytes(t, &SegmentRef{SegmentID: "x", MediaType: MediaRows, Table: "t"}, v)
	subEnd := frameBytes(t, &SubEnd{NextCursor: 1}, v)
	errFrame := frameBytes(t, &ErrorFrame{Code: "sync.internal_error"}, v)
	unknown := rawFrame{0x17, []byte("x")}
	reqFrame := frameBytes(t, &PullHeader{Accept: 3}, v)

	tests := []struct {
		name   string
		frames []rawFrame
		ok     bool
	}{
		{"header only", []rawFrame{hdr}, true},
		{"lease then section", []rawFrame{hdr, lease, subStart, subEnd}, true},
		{"unknown before lease", []rawFrame{hdr, unknown, lease}, true},
		{"lease after result", []rawFrame{hdr, applied, lease}, false},
		{"two leases", []rawFrame{hdr, lease, lease}, false},
		{"details after rejected", []rawFrame{hdr, rejected, details}, true},
		{"details after applied", []rawFrame{hdr, applied, details}, false},
		{"details twice", []rawFrame{hdr, rejected, details, details}, false},
		{"result after section", []rawFrame{hdr, subStart, subEnd, applied}, false},
		{"commits then segment", []rawFrame{hdr, subStart, commit, ref, subEnd}, false},
		{"segment then commit", []rawFrame{hdr, subStart, ref, commit, subEnd}, false},
		{"commit outside section", []rawFrame{hdr, commit}, false},
		{"nested section", []rawFrame{hdr, subStart, subStart, subEnd}, false},
		{"open section at end", []rawFrame{hdr, subStart, commit}, false},
		{"error closes open section", []rawFrame{hdr, subStart, commit, errFrame}, true},
		{"frame after error", []rawFrame{hdr, errFrame, subStart}, false},
		{"unknown after error", []rawFrame{hdr, errFrame, unknown}, false},
		{"unknown first", []rawFrame{unknown, hdr}, false},
		{"request frame in response", []rawFrame{hdr, reqFrame}, false},
		{"two headers", []rawFrame{hdr, hdr}, false},
		{"no header", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bin := rawMessage(v, KindResponse, tt.frames...)
			m, err := DecodeMessage(bin, DecoderOptions{})
			if got := err == nil; got != tt.ok {
				t.Fatalf("decode ok = %v (%v), want %v", got, err, tt.ok)
			}
			if err != nil {
				if ErrorCode(err) != CodeInvalidRequest {
					t.Fatalf("code %q, want %s", ErrorCode(err), CodeInvalidRequest)
				}
				return
			}
			// The encoder accepts exactly what the decoder accepts.
			re, err := m.MarshalBinary()
			if err != nil || !bytes.Equal(re, bin) {
				t.Fatalf("re-encode: %v", err)
			}
		})
	}
}

func TestRequestGrammar(t *testing.T) {
	for _, v := range []uint16{Version1, Version2, Version3} {
		hdr := frameBytes(t, &ReqHeader{ClientID: "c", SchemaVersion: 1}, v)
		push := frameBytes(t, &PushCommit{ClientCommitID: "k", Operations: []Operation{{Table: "t", RowID: "r", Op: OpDelete}}}, v)
		pull := frameBytes(t, &PullHeader{Accept: 3}, v)
		sub := frameBytes(t, &Subscription{ID: "s", Table: "t", Cursor: -1}, v)
		subStart := frameBytes(t, &SubStart{ID: "s", Status: SubActive}, v)
		tests := []struct {
			name   string
			frames []rawFrame
			want   string
		}{
			{"push and pull", []rawFrame{hdr, push, pull, sub, sub}, ""},
			{"pull only", []rawFrame{hdr, pull}, ""},
			{"no content", []rawFrame{hdr}, CodeInvalidRequest},
			{"push after pull", []rawFrame{hdr, pull, push}, CodeInvalidRequest},
			{"subscription without pull", []rawFrame{hdr, push, sub}, CodeInvalidRequest},
			{"two pulls", []rawFrame{hdr, pull, pull}, CodeInvalidRequest},
			{"response frame", []rawFrame{hdr, pull, subStart}, CodeInvalidRequest},
			{"empty commit", []rawFrame{hdr, {FramePushCommit, []byte{1, 0, 0, 0, 'k', 0, 0, 0, 0}}}, CodeEmptyCommit},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				_, err := DecodeRequest(rawMessage(v, KindRequest, tt.frames...), DecoderOptions{})
				if got := ErrorCode(err); got != tt.want {
					t.Fatalf("v%d: code %q (%v), want %q", v, got, err, tt.want)
				}
			})
		}
	}
}

func TestDecoderEnvelope(t *testing.T) {
	good := rawMessage(Version3, KindRequest,
		rawFrame{FrameReqHeader, []byte{1, 0, 0, 0, 'c', 1, 0, 0, 0, 0}},
		rawFrame{FramePullHeader, make([]byte, 13)})
	if _, err := DecodeRequest(good, DecoderOptions{}); err != nil {
		t.Fatalf("baseline: %v", err)
	}
	tests := []struct {
		name string
		edit func([]byte) []byte
		opts DecoderOptions
	}{
		{"trailing byte", func(b []byte) []byte { return append(b, 0) }, DecoderOptions{}},
		{"end with length", func(b []byte) []byte { b[len(b)-4] = 1; return append(b, 0) }, DecoderOptions{}},
		{"unknown msgKind", func(b []byte) []byte { b[6] = 3; return b }, DecoderOptions{}},
		{"wrong kind", func(b []byte) []byte { return b }, DecoderOptions{Kind: KindResponse}},
		{"frame over limit", func(b []byte) []byte { return b }, DecoderOptions{MaxFrameBytes: 9}},
		{"truncated header", func(b []byte) []byte { return b[:5] }, DecoderOptions{}},
		{"version 0", func(b []byte) []byte { b[4] = 0; return b }, DecoderOptions{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.edit(bytes.Clone(good))
			_, err := DecodeMessage(b, tt.opts)
			if ErrorCode(err) != CodeInvalidRequest {
				t.Fatalf("got %v, want %s", err, CodeInvalidRequest)
			}
			_, err = ReadMessage(bytes.NewReader(b), tt.opts)
			if ErrorCode(err) != CodeInvalidRequest {
				t.Fatalf("stream: got %v, want %s", err, CodeInvalidRequest)
			}
		})
	}
}

func TestEncoderRefusals(t *testing.T) {
	big := int64(MaxSafeInteger + 1)
	tests := []struct {
		name string
		f    Frame
	}{
		{"registered type as unknown", &Unknown{FrameType: FrameCommit}},
		{"END as unknown", &Unknown{FrameType: FrameEnd}},
		{"i64 out of range", &SubEnd{NextCursor: big}},
		{"invalid utf-8", &SubStart{ID: "\xff", Status: SubActive}},
		{"unsorted scopes", &SubStart{ID: "s", Status: SubActive, EffectiveScopes: ScopeMap{{Key: "b"}, {Key: "a"}}}},
		{"bad json", &SubEnd{BootstrapState: ptr("{")}},
		{"upsert without row", &Commit{Tables: []string{"t"}, Changes: []Change{{Op: OpUpsert}}}},
		{"table index out of range", &Commit{Changes: []Change{{Op: OpDelete}}}},
		{"unknown media type", &SegmentRef{MediaType: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			e, _ := NewEncoder(&buf, KindResponse, Version3)
			if err := e.Encode(&RespHeader{LogEpoch: "e"}); err != nil {
				t.Fatal(err)
			}
			before := bytes.Clone(e.w.b)
			if err := e.Encode(tt.f); err == nil {
				t.Fatalf("encode accepted %s", tt.name)
			}
			if !bytes.Equal(e.w.b, before) {
				t.Fatalf("a refused frame left bytes behind")
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestI64Range(t *testing.T) {
	for _, tt := range []struct {
		v  int64
		ok bool
	}{{MaxSafeInteger, true}, {-MaxSafeInteger, true}, {MaxSafeInteger + 1, false}, {-MaxSafeInteger - 1, false}} {
		b := binary.LittleEndian.AppendUint64(nil, uint64(tt.v))
		r := newReader(b)
		r.i64("v")
		if (r.err == nil) != tt.ok {
			t.Errorf("i64 %d: err %v, want ok=%v", tt.v, r.err, tt.ok)
		}
	}
}

func TestEncoderAbort(t *testing.T) {
	var buf bytes.Buffer
	e, _ := NewEncoder(&buf, KindResponse, Version3)
	if err := e.Encode(&RespHeader{LogEpoch: "e"}); err != nil {
		t.Fatal(err)
	}
	if err := e.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := e.Encode(&SubStart{ID: "s", Status: SubActive}); err != nil {
		t.Fatal(err)
	}
	// The unflushed SUB_START is discarded; ERROR and END follow the
	// flushed header.
	if err := e.Abort(&ErrorFrame{Code: "sync.schema_not_ready", Message: "m", Category: "internal"}); err != nil {
		t.Fatal(err)
	}
	m, err := DecodeMessage(buf.Bytes(), DecoderOptions{})
	if err != nil {
		t.Fatalf("aborted message does not decode: %v", err)
	}
	if len(m.Frames) != 2 || m.Frames[1].Type() != FrameError {
		t.Fatalf("frames = %v, want RESP_HEADER, ERROR", m.Frames)
	}
	// Nothing flushed yet: Abort keeps the envelope and RESP_HEADER.
	var buf2 bytes.Buffer
	e2, _ := NewEncoder(&buf2, KindResponse, Version3)
	_ = e2.Encode(&RespHeader{LogEpoch: "e"})
	_ = e2.Encode(&SubStart{ID: "s", Status: SubActive})
	if err := e2.Abort(&ErrorFrame{Code: "x"}); err != nil {
		t.Fatal(err)
	}
	m2, err := DecodeMessage(buf2.Bytes(), DecoderOptions{})
	if err != nil {
		t.Fatalf("aborted unflushed message does not decode: %v", err)
	}
	if len(m2.Frames) != 2 || m2.Frames[0].Type() != FrameRespHeader || m2.Frames[1].Type() != FrameError {
		t.Fatalf("frames = %v, want RESP_HEADER, ERROR", m2.Frames)
	}
}
