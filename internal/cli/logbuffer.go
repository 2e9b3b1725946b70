package cli

import (
	"io"
	"sync"
	"time"
)

// The access log writes a line per request: at a few thousand requests a
// second, a write system call each cost the server a tenth of its CPU per
// request (BENCHMARKS.md). Its lines go through a lineBuffer instead: held
// for at most accessFlushDelay (or until accessFlushBytes gather) and
// written together. The server's own lines (warnings, errors, events) go
// through the buffer's direct writer: they flush what is held first, so
// the order of lines is kept, and are written at once.
const (
	accessFlushDelay = 50 * time.Millisecond
	accessFlushBytes = 32 << 10
)

// lineBuffer collects whole lines (each Write is one log record) for w.
type lineBuffer struct {
	w     io.Writer
	delay time.Duration

	mu    sync.Mutex
	buf   []byte
	timer *time.Timer // armed while buf holds lines
}

func newLineBuffer(w io.Writer, delay time.Duration) *lineBuffer {
	return &lineBuffer{w: w, delay: delay}
}

// Write holds p (a record) until the delay passes or enough gathered.
func (b *lineBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) >= accessFlushBytes {
		return len(p), b.flushLocked()
	}
	if b.timer == nil {
		b.timer = time.AfterFunc(b.delay, b.timed)
	}
	return len(p), nil
}

// timed flushes when the delay passed.
func (b *lineBuffer) timed() {
	b.mu.Lock()
	defer b.mu.Unlock()
	_ = b.flushLocked()
}

// Flush writes what is held.
func (b *lineBuffer) Flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.flushLocked()
}

func (b *lineBuffer) flushLocked() error {
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	if len(b.buf) == 0 {
		return nil
	}
	_, err := b.w.Write(b.buf)
	if cap(b.buf) > 4*accessFlushBytes {
		b.buf = nil // a burst's buffer is not kept
	} else {
		b.buf = b.buf[:0]
	}
	return err
}

// direct returns a writer that writes at once, after what is held.
func (b *lineBuffer) direct() io.Writer { return directWriter{b} }

type directWriter struct{ b *lineBuffer }

func (d directWriter) Write(p []byte) (int, error) {
	d.b.mu.Lock()
	defer d.b.mu.Unlock()
	if err := d.b.flushLocked(); err != nil {
		return 0, err
	}
	return d.b.w.Write(p)
}
