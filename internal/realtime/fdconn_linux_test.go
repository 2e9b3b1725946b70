package realtime

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gobwas/ws"
)

// wrappedConn wraps an accepted connection as the server's listener does
// (Unwrap) and counts its Close calls.
type wrappedConn struct {
	net.Conn
	closes atomic.Int32
}

func (w *wrappedConn) Unwrap() net.Conn { return w.Conn }
func (w *wrappedConn) SyscallConn() (syscall.RawConn, error) {
	return w.Conn.(syscall.Conn).SyscallConn()
}
func (w *wrappedConn) Close() error {
	w.closes.Add(1)
	return w.Conn.Close()
}

// opaqueConn wraps a connection without Unwrap.
type opaqueConn struct{ net.Conn }

func (o opaqueConn) SyscallConn() (syscall.RawConn, error) {
	return o.Conn.(syscall.Conn).SyscallConn()
}

// TestAdoptOnlyTCP: a connection that is not (and does not unwrap to) a
// TCP connection is not adopted, and keeps its descriptor.
func TestAdoptOnlyTCP(t *testing.T) {
	cl, sv := tcpPair(t)
	if fc := adopt(opaqueConn{sv}); fc != nil {
		t.Fatal("adopted a connection that does not unwrap to a TCP connection")
	}
	if _, err := sv.Write([]byte("x")); err != nil {
		t.Fatalf("the connection was damaged: %v", err)
	}
	b := make([]byte, 1)
	if _, err := io.ReadFull(cl, b); err != nil || b[0] != 'x' {
		t.Fatalf("read %q, %v", b, err)
	}
}

// adoptedPair returns an fdConn adopted from the server side of a real
// TCP connection, registered in a running poller, the wrapper it was
// adopted from, the accepted connection, and the client side.
func adoptedPair(t *testing.T) (*fdConn, *wrappedConn, *net.TCPConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	w := &wrappedConn{Conn: sc}
	fc := adopt(w)
	if fc == nil {
		t.Fatal("adopt: nil")
	}
	p := newPoller()
	if p == nil {
		t.Fatal("no poller")
	}
	go p.run(func(*session, bool, []byte) {})
	t.Cleanup(p.stop)
	wc := &wsConn{nc: fc, rc: &fc.raw, fc: fc, wakeAt: -1}
	if !p.add(&session{conn: wc}) {
		t.Fatal("poller add failed")
	}
	t.Cleanup(func() { fc.Close() })
	return fc, w, sc.(*net.TCPConn), client
}

// TestAdoptedSocket: a socket the hub adopts leaves the runtime (the
// accepted connection's own descriptor is closed) and works through the
// hub's poller alone: a read waits for the peer's bytes, a write larger
// than the socket buffers waits for the peer to read, deadlines expire
// waiting reads and writes with os.ErrDeadlineExceeded, a deadline set
// meanwhile is taken up, the end of the stream is io.EOF, and Close wakes
// a waiting read with net.ErrClosed and closes the wrapper once.
func TestAdoptedSocket(t *testing.T) {
	fc, w, accepted, client := adoptedPair(t)

	rc, err := accepted.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Control(func(uintptr) {}); err == nil {
		t.Fatal("the accepted connection's descriptor is still open after adopt")
	}

	// A read waits for the peer's bytes.
	go func() {
		time.Sleep(50 * time.Millisecond)
		_, _ = client.Write([]byte("hello"))
	}()
	buf := make([]byte, 16)
	n, err := fc.Read(buf)
	if err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("read %q, %v; want hello", buf[:n], err)
	}

	// A deadline ends a waiting read.
	_ = fc.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	if _, err := fc.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	// A deadline set while a read waits is taken up.
	_ = fc.SetReadDeadline(time.Time{})
	readErr := make(chan error, 1)
	go func() {
		_, err := fc.Read(buf)
		readErr <- err
	}()
	time.Sleep(30 * time.Millisecond)
	_ = fc.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	select {
	case err := <-readErr:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read: %v, want os.ErrDeadlineExceeded", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a deadline set while the read waited did not end it")
	}
	_ = fc.SetReadDeadline(time.Time{})

	// A write larger than the socket buffers waits for the peer to read.
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	got := make(chan []byte, 1)
	go func() {
		time.Sleep(50 * time.Millisecond) // the write fills the buffers first
		b, _ := io.ReadAll(io.LimitReader(client, int64(len(big))))
		got <- b
	}()
	if n, err := fc.Write(big); err != nil || n != len(big) {
		t.Fatalf("write %d of %d: %v", n, len(big), err)
	}
	if b := <-got; !bytes.Equal(b, big) {
		t.Fatalf("the peer read %d bytes, not what was written", len(b))
	}

	// A batch of frames goes out in order, in one writev when it fits
	// the buffers, in several when the peer must read first.
	bufs := [][]byte{[]byte("a"), {}, []byte("bc"), big, []byte("d")}
	want := bytes.Join(bufs, nil)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(client, int64(len(want))))
		got <- b
	}()
	if n, err := fc.writeBuffers(bufs); err != nil || n != len(want) {
		t.Fatalf("writeBuffers %d of %d: %v", n, len(want), err)
	}
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("the peer read %d bytes, not the batch written", len(b))
	}

	// A deadline ends a write that waits for room.
	// (more than the peer's and this side's buffers hold: nothing reads)
	_ = fc.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := fc.Write(make([]byte, 64<<20)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write past its deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	_ = fc.SetWriteDeadline(time.Time{})

	// Close wakes a waiting read and closes the wrapper once.
	go func() {
		_, err := fc.Read(buf)
		readErr <- err
	}()
	time.Sleep(30 * time.Millisecond)
	if err := fc.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-readErr:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not wake the waiting read")
	}
	if n := w.closes.Load(); n != 1 {
		t.Fatalf("the wrapper was closed %d times, want 1", n)
	}
	if err := fc.Close(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("second Close: %v, want net.ErrClosed", err)
	}
	if _, err := fc.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after Close: %v, want net.ErrClosed", err)
	}
}

// TestAdoptedCloseWakesEveryWaiter: Close ends reads and a write that
// wait, two reads on one connection included (Close signals each waiter
// channel once; the woken waiter passes it on), and the connection keeps
// its addresses.
func TestAdoptedCloseWakesEveryWaiter(t *testing.T) {
	fc, _, _, client := adoptedPair(t)
	if fc.LocalAddr().String() != client.RemoteAddr().String() || fc.RemoteAddr().String() != client.LocalAddr().String() {
		t.Fatalf("addresses %v -> %v, want %v -> %v", fc.LocalAddr(), fc.RemoteAddr(), client.RemoteAddr(), client.LocalAddr())
	}
	errs := make(chan error, 3)
	for range 2 {
		go func() {
			_, err := fc.Read(make([]byte, 16))
			errs <- err
		}()
	}
	go func() { // more than the buffers hold: nothing reads
		_, err := fc.Write(make([]byte, 64<<20))
		errs <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := fc.Close(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		select {
		case err := <-errs:
			if !errors.Is(err, net.ErrClosed) {
				t.Fatalf("a waiter after Close: %v, want net.ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Close did not wake every waiting read and write")
		}
	}
	if fc.LocalAddr() == nil || fc.RemoteAddr().String() != client.LocalAddr().String() {
		t.Fatalf("addresses after Close: %v -> %v", fc.LocalAddr(), fc.RemoteAddr())
	}
}

// TestAdoptedSocketEOF: the peer's close is the end of the stream for a
// read that waits, and CloseWrite half-closes the adopted socket.
func TestAdoptedSocketEOF(t *testing.T) {
	fc, _, _, client := adoptedPair(t)
	if err := fc.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(client); err != nil || len(b) != 0 {
		t.Fatalf("peer read %q, %v after CloseWrite; want the end of the stream", b, err)
	}
	readErr := make(chan error, 1)
	go func() {
		_, err := fc.Read(make([]byte, 8))
		readErr <- err
	}()
	time.Sleep(30 * time.Millisecond)
	_ = client.Close()
	select {
	case err := <-readErr:
		if err != io.EOF {
			t.Fatalf("read after the peer closed: %v, want io.EOF", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the peer's close did not end the waiting read")
	}
}

// TestAdoptedCloseFrameWaitsForRoom: a connection that ends while its
// close frame waits for room in a full socket buffer (a client that
// stopped reading, then reads again) still sends it as soon as the
// client reads: the poller keeps the connection until it is closed, so
// the write that waits is woken, not left to the write timeout.
func TestAdoptedCloseFrameWaitsForRoom(t *testing.T) {
	_, cl := fullAdoptedSocket(t)
	// An unmasked client frame breaks RFC 6455: the server closes with
	// 1002 and the reader ends, with the close frame still to be written.
	if _, err := cl.Write([]byte{0x81, 0x01, 'x'}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	readToClose(t, cl)
}

// TestAdoptedHubCloseWaitsForRoom: the hub's Close sends a going-away
// close frame to a socket whose send buffer is full; once the client
// reads again, Close returns without waiting for the write timeout (the
// poller still runs while the close frames are written).
func TestAdoptedHubCloseWaitsForRoom(t *testing.T) {
	e, cl := fullAdoptedSocket(t)
	closed := make(chan struct{})
	go func() {
		e.hub.Close()
		close(closed)
	}()
	time.Sleep(100 * time.Millisecond)
	readToClose(t, cl)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close still waits 10 s after the client read its close frame")
	}
}

// fullAdoptedSocket attaches an adopted socket to a hub with a one-minute
// write timeout and fills its send buffer (fillSendBuffer).
func fullAdoptedSocket(t *testing.T) (*raceEnv, net.Conn) {
	t.Helper()
	e := newRaceEnv(t, func(c *Config) { c.WriteTimeout = time.Minute })
	if e.hub.poll == nil {
		t.Skip("no poller")
	}
	cl, sv := tcpPair(t)
	e.attachConn(cl, sv)
	sessions := e.hub.allSessions()
	if len(sessions) != 1 || sessions[0].conn.fc == nil {
		t.Fatalf("want one adopted session, have %d", len(sessions))
	}
	fillSendBuffer(t, sessions[0].conn)
	return e, cl
}

// fillSendBuffer queues 64 KiB data frames on wc until its queue stays
// full: the client, which reads nothing, has every buffer full.
func fillSendBuffer(t *testing.T, wc *wsConn) {
	t.Helper()
	f := binaryFrame(make([]byte, 64<<10))
	full := time.Time{}
	for full.IsZero() || time.Since(full) < 200*time.Millisecond {
		switch err := wc.send(f); {
		case err == nil:
			full = time.Time{}
		case errors.Is(err, errQueueFull):
			if full.IsZero() {
				full = time.Now()
			}
			time.Sleep(5 * time.Millisecond)
		default:
			t.Fatal(err)
		}
	}
}

// readToClose reads the server's frames until its close frame, within
// 10 s.
func readToClose(t *testing.T, cl net.Conn) {
	t.Helper()
	_ = cl.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(cl)
	for {
		h, err := ws.ReadHeader(br)
		if err != nil {
			t.Fatalf("no close frame within 10 s of reading again: %v", err)
		}
		if _, err := io.CopyN(io.Discard, br, h.Length); err != nil {
			t.Fatal(err)
		}
		if h.OpCode == ws.OpClose {
			return
		}
	}
}
