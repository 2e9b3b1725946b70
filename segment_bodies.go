package syncgo

import (
	"bytes"
	"io"
	"sync"
)

// segmentBodies keeps the compressed response bodies of recently
// downloaded segments, so that the clients of a bootstrap storm (and the
// same client's retries) do not compress the same segment once per
// download. A segment id is the hash of its bytes (§5.1), so an entry
// keyed by id and encoding is never stale. It holds bodies only: every
// download is authorized in full before its body is looked up. Bounded in
// bytes, the oldest entries go first.
type segmentBodies struct {
	mu    sync.Mutex
	bytes int
	order []bodyKey
	m     map[bodyKey][]byte
}

type bodyKey struct{ id, enc string }

// segmentBodyBytes bounds the compressed bytes kept.
const segmentBodyBytes = 32 << 20

// body returns the body of segment id encoded with enc, compressing and
// remembering it on a miss.
func (c *segmentBodies) body(codecs *codecPools, id string, raw []byte, enc string) ([]byte, error) {
	return c.bodyFrom(codecs, id, bytes.NewReader(raw), int64(len(raw)), enc)
}

// lookup returns the body of segment id in the coding enc when it is
// kept.
func (c *segmentBodies) lookup(id, enc string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.m[bodyKey{id, enc}]
	return b, ok
}

// bodyFrom is body of a segment of size bytes read from r (read only on
// a miss).
func (c *segmentBodies) bodyFrom(codecs *codecPools, id string, r io.Reader, size int64, enc string) ([]byte, error) {
	k := bodyKey{id, enc}
	if b, ok := c.lookup(id, enc); ok {
		return b, nil
	}
	var buf bytes.Buffer
	buf.Grow(int(size/8) + 64)
	w, closeEnc := codecs.writer(&buf, enc)
	_, err := io.Copy(w, r)
	if cerr := closeEnc(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	b := buf.Bytes()
	if len(b) > segmentBodyBytes/4 {
		return b, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; ok {
		return b, nil
	}
	if c.m == nil {
		c.m = map[bodyKey][]byte{}
	}
	c.m[k] = b
	c.order = append(c.order, k)
	c.bytes += len(b)
	for c.bytes > segmentBodyBytes && len(c.order) > 0 {
		old := c.order[0]
		c.order = c.order[1:]
		c.bytes -= len(c.m[old])
		delete(c.m, old)
	}
	return b, nil
}
