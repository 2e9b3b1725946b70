package sspclient

import (
	"compress/gzip"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"

	"github.com/klauspost/compress/zstd"

	"github.com/syncgo/syncgo/syncerr"
)

// HTTPError is a non-200 answer of the server. Protocol holds the §10.1
// body when the answer was the catalog's JSON shape.
type HTTPError struct {
	StatusCode int
	Protocol   *syncerr.Error
	// ContentType is the answer's Content-Type.
	ContentType string
}

// Error describes the answer by its status and catalog code.
func (e *HTTPError) Error() string {
	if e.Protocol != nil {
		return fmt.Sprintf("sspclient: HTTP %d: %s: %s", e.StatusCode, e.Protocol.Code, e.Protocol.Message)
	}
	return fmt.Sprintf("sspclient: HTTP %d", e.StatusCode)
}

// Unwrap returns the protocol error, so that syncerr.As finds it.
func (e *HTTPError) Unwrap() error {
	if e.Protocol == nil {
		return nil
	}
	return e.Protocol
}

// Code returns the protocol error code, or "".
func (e *HTTPError) Code() string {
	if e.Protocol == nil {
		return ""
	}
	return e.Protocol.Code
}

func newHTTPError(status int, contentType string, body []byte) *HTTPError {
	e := &HTTPError{StatusCode: status, ContentType: contentType}
	if mt, _, _ := mime.ParseMediaType(contentType); mt == "application/json" {
		if pe, err := syncerr.ParseJSON(body); err == nil {
			pe.HTTPStatus = status
			e.Protocol = pe
		}
	}
	return e
}

// SchemaFloorError is the schema-floor response (§1.6): the server does
// not serve the client's schema version.
type SchemaFloorError struct {
	ClientVersion  int32
	RequiredSchema int32
	LatestSchema   int32
}

// Error describes the schema-floor response.
func (e *SchemaFloorError) Error() string {
	return fmt.Sprintf("sspclient: sync.client_schema_unsupported: schema version %d is not served (required %d, latest %d)",
		e.ClientVersion, e.RequiredSchema, e.LatestSchema)
}

// zstdDecoders reuses zstd decoders across responses.
var zstdDecoders = sync.Pool{New: func() any {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true))
	if err != nil {
		return err
	}
	return d
}}

// decodedBody returns the response body decoded by its Content-Encoding,
// and a function that releases the decoder.
func decodedBody(resp *http.Response) (io.Reader, func(), error) {
	enc := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding")))
	switch enc {
	case "", "identity":
		return resp.Body, func() {}, nil
	case "gzip":
		gz, err := gzip.NewReader(resp.Body)
		if err != nil {
			return nil, nil, fmt.Errorf("sspclient: gzip response: %w", err)
		}
		return gz, func() { _ = gz.Close() }, nil
	case "zstd":
		d, ok := zstdDecoders.Get().(*zstd.Decoder)
		if !ok {
			return nil, nil, fmt.Errorf("sspclient: zstd decoder unavailable")
		}
		if err := d.Reset(resp.Body); err != nil {
			zstdDecoders.Put(d)
			return nil, nil, fmt.Errorf("sspclient: zstd response: %w", err)
		}
		return d, func() {
			_ = d.Reset(nil)
			zstdDecoders.Put(d)
		}, nil
	}
	return nil, nil, fmt.Errorf("sspclient: unsupported response Content-Encoding %q", enc)
}
