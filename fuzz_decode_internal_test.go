package syncgo

import (
	"bytes"
	stdgzip "compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/syncgo/syncgo/syncerr"
)

// FuzzBlobGrant: an upload-grant body is refused with sync.invalid_request
// (400), or it is one JSON object whose exact member byteLength is the
// non-negative integer returned, and whose mediaType is absent, null or a
// string.
func FuzzBlobGrant(f *testing.F) {
	for _, s := range []string{`{"byteLength":12}`, `{"byteLength":0,"mediaType":"text/plain"}`, `{"byteLength":-1}`,
		`{"byteLength":1e3}`, `{"byteLength":"5"}`, `{"ByteLength":5}`, `{"byteLength":5} {}`, `{"byteLength":5}x`,
		`{"byteLength":5,"mediaType":7}`, `{"byteLength":5,"mediaType":null}`, `null`, `[]`, `{"byteLength":99999999999999999999}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		n, perr := decodeBlobGrant(body)
		if perr != nil {
			if perr.Code != syncerr.CodeInvalidRequest || perr.Status() != http.StatusBadRequest {
				t.Fatalf("refusal %s (%d)", perr.Code, perr.Status())
			}
			return
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil || dec.InputOffset() != int64(len(bytes.TrimRight(body, " \t\r\n"))) || !json.Valid(body) {
			t.Fatalf("accepted %q, which is not one JSON value", body)
		}
		obj, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("accepted %q, which is not an object", body)
		}
		num, ok := obj["byteLength"].(json.Number)
		if got, err := num.Int64(); !ok || err != nil || got != n || n < 0 {
			t.Fatalf("accepted %q as %d", body, n)
		}
		if mt, ok := obj["mediaType"]; ok && mt != nil {
			if _, isStr := mt.(string); !isStr {
				t.Fatalf("accepted %q, whose mediaType is %T", body, mt)
			}
		}
	})
}

// FuzzDecodedBody: a request body under any Content-Encoding header is
// refused (415 for a coding other than gzip or identity), or reads as the
// bytes the standard library's gzip reader gives (or the bytes as they
// are), never more than the cap: past it the read fails with
// errBodyTooLarge. A stream the standard library refuses is refused.
func FuzzDecodedBody(f *testing.F) {
	f.Add("gzip", []byte("hello, world"), uint16(100), true)
	f.Add("GZIP ", bytes.Repeat([]byte{0}, 4000), uint16(10), true)
	f.Add("", []byte("plain"), uint16(5), false)
	f.Add("identity", []byte("plain"), uint16(4), false)
	f.Add("br", []byte("x"), uint16(4), false)
	f.Add("gzip", []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0}, uint16(4), false)
	f.Fuzz(func(t *testing.T, enc string, body []byte, limit uint16, compress bool) {
		payload := body
		if compress {
			var b bytes.Buffer
			zw, _ := stdgzip.NewWriterLevel(&b, stdgzip.HuffmanOnly) // cheap: the fuzzer makes many
			_, _ = zw.Write(body)
			_ = zw.Close()
			payload = b.Bytes()
		}
		max := int64(limit)
		r := httptest.NewRequest(http.MethodPost, "/sync", nil)
		r.Header.Set("Content-Encoding", enc)
		rd, gz, perr := decodedBody(r, bytes.NewReader(payload), max)
		norm := strings.ToLower(strings.TrimSpace(enc))
		var want []byte
		var wantErr error
		switch norm {
		case "", "identity":
			want = payload
		case "gzip":
			zr, err := stdgzip.NewReader(bytes.NewReader(payload))
			if err == nil {
				want, err = io.ReadAll(zr)
			}
			wantErr = err
		default:
			if perr == nil || perr.Code != syncerr.CodeInvalidRequest || perr.Status() != http.StatusUnsupportedMediaType {
				t.Fatalf("coding %q: %v", enc, perr)
			}
			return
		}
		var got []byte
		var err error
		if perr != nil {
			err = perr
		} else {
			got, err = io.ReadAll(rd)
			if gz != nil {
				_ = gz.Close()
			}
		}
		if int64(len(got)) > max {
			t.Fatalf("read %d bytes past the cap %d", len(got), max)
		}
		switch {
		case wantErr != nil:
			if err == nil {
				t.Fatalf("coding %q: the standard library refuses the body (%v), decodedBody reads %d bytes", enc, wantErr, len(got))
			}
		case int64(len(want)) > max:
			if !errors.Is(err, errBodyTooLarge) {
				t.Fatalf("a %d-byte body under the cap %d: %d bytes, %v", len(want), max, len(got), err)
			}
		default:
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("coding %q: read %d bytes, %v; want %d bytes", enc, len(got), err, len(want))
			}
		}
	})
}
