package syncgo_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gobwas/httphead"
	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsflate"

	"github.com/syncgo/syncgo/wire"
)

// The realtime benchmarks run one server over real sockets.
//
//	go test -run '^$' -bench BenchmarkRealtime -benchtime 200x .
//
// BenchmarkRealtimeFanout1000 measures, per commit, the time from the push
// acknowledgement (the HTTP push response fully received by the pusher) to
// the delta being read by each of 1,000 sockets, and reports the p50 and
// p99 over every (commit, socket) pair. The 1,000 clients read in the same
// process (one goroutine each), so the figure includes their scheduling on
// the same CPUs as the server. A delta read before the push response
// counts as 0.
//
// BenchmarkRealtimeFanout1000 also reports server-cpu-ms/commit: the
// server process's CPU time (user+system, all goroutines: the HTTP push,
// sqlite, the fan-out and the socket writes) per commit, a figure the
// machine's load does not inflate the way it inflates latency.
//
// BenchmarkRealtimeIdleSocketMemory measures the server's memory per idle
// connected socket with the clients in a child process (this test binary
// re-executed as TestRealtimeMemChild), so the parent's runtime.MemStats
// hold the server side only: (HeapInuse+StackInuse) after the sockets
// connected and said hello, minus before, over the socket count, each
// after two forced GCs. Kernel socket buffers are not Go memory and not
// counted. RT_MEM_PROFILE=file writes a heap profile of the connected
// state (with MemProfileRate 1) to see where the bytes go.

const rtBenchSockets = 1000

// BenchmarkRealtimeFanout1000InProcess is the fan-out benchmark with the
// 1,000 clients reading in the server's process.
func BenchmarkRealtimeFanout1000InProcess(b *testing.B) {
	rtRaiseNoFile(b, 2*rtBenchSockets+256)
	e := newRTEnv(b)
	pusher := e.peer("bob", "b1")
	pusher.push("c0", rtTask{id: "t0", project: "p1"})
	socks := e.dialMany(b, e.rtRegister(b, rtBenchSockets, "k"))
	lat := make([]time.Duration, 0, b.N*rtBenchSockets)
	fromSend := make([]time.Duration, 0, b.N*rtBenchSockets)
	b.ResetTimer()
	for i := range b.N {
		id := "t" + strconv.Itoa(i+1)
		sent := time.Now()
		seq := pusher.push("c"+strconv.Itoa(i+1), rtTask{id: id, project: "p1", title: "bench"})
		acked := time.Now()
		msgs := make([]rtMsg, len(socks))
		for j, s := range socks {
			msgs[j] = s.next(rtWait) // decoded below, off the clients' critical path
		}
		for j, m := range msgs {
			_, next := rtDeltaRows(rtDecodeDelta(b, socks[j].clientID, m))
			if next["s"] != seq {
				b.Fatalf("%s: delta at %d, want %d", socks[j].clientID, next["s"], seq)
			}
			lat = append(lat, max(0, m.at.Sub(acked)))
			fromSend = append(fromSend, m.at.Sub(sent))
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	slices.Sort(fromSend)
	pct := rtPercentile
	b.ReportMetric(pct(lat, 0.50), "p50-ms")
	b.ReportMetric(pct(lat, 0.90), "p90-ms")
	b.ReportMetric(pct(lat, 0.99), "p99-ms")
	b.ReportMetric(pct(lat, 1), "max-ms")
	b.ReportMetric(pct(fromSend, 0.99), "p99-from-push-start-ms")
	b.ReportMetric(0, "ns/op")
	if st := e.srv.RealtimeStats(); st.Wakes != 0 {
		b.Fatalf("wakes during the benchmark: %+v", st)
	}
}

func rtPercentile(sorted []time.Duration, p float64) float64 {
	return float64(sorted[int(float64(len(sorted)-1)*p)]) / float64(time.Millisecond)
}

// BenchmarkRealtimeFanout1000 is the fan-out benchmark with the 1,000
// clients in a child process (they still share the machine's CPUs): the
// parent pushes, tells the child each push's acknowledgement time, and the
// child, which stamps every delta when its read returns, reports the
// percentiles of (delta read − push acknowledged) over every (commit,
// socket) pair; a delta read before the acknowledgement counts as 0.
func BenchmarkRealtimeFanout1000(b *testing.B) { rtFanoutBench(b, "fanout") }

// BenchmarkRealtimeFanout1000Acked is BenchmarkRealtimeFanout1000 with
// each client acking every delta once it has read it, as the Syncular
// client does: the server also reads 1,000 acks per commit.
func BenchmarkRealtimeFanout1000Acked(b *testing.B) { rtFanoutBench(b, "fanout-ack") }

func rtFanoutBench(b *testing.B, mode string) {
	rtRaiseNoFile(b, 2*rtBenchSockets+256)
	e := newRTEnv(b)
	pusher := e.peer("bob", "b1")
	pusher.push("c0", rtTask{id: "t0", project: "p1"})
	e.rtRegister(b, rtBenchSockets, "k")
	ch := rtStartChild(b, e, mode, rtBenchSockets)
	defer ch.stop()
	cpu0 := rtCPU()
	pushes := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		sent := time.Now()
		seq := pusher.push("c"+strconv.Itoa(i+1), rtTask{id: "t" + strconv.Itoa(i+1), project: "p1", title: "bench"})
		acked := time.Now()
		pushes = append(pushes, acked.Sub(sent))
		ch.send(b, fmt.Sprintf("ack %d %d %d", seq, sent.UnixNano(), acked.UnixNano()))
		ch.wait(b, fmt.Sprintf("RT-DONE %d", seq))
	}
	b.StopTimer()
	cpu := rtCPU() - cpu0
	ch.send(b, "end")
	res := ch.wait(b, "RT-RESULT")
	var p50, p90, p99, mx, p99s float64
	if _, err := fmt.Sscanf(res, "RT-RESULT %g %g %g %g %g", &p50, &p90, &p99, &mx, &p99s); err != nil {
		b.Fatalf("%q: %v", res, err)
	}
	b.ReportMetric(p50, "p50-ms")
	b.ReportMetric(p90, "p90-ms")
	b.ReportMetric(p99, "p99-ms")
	b.ReportMetric(mx, "max-ms")
	b.ReportMetric(p99s, "p99-from-push-start-ms")
	b.ReportMetric(float64(cpu)/float64(time.Millisecond)/float64(b.N), "server-cpu-ms/commit")
	slices.Sort(pushes)
	b.ReportMetric(rtPercentile(pushes, 0.5), "push-p50-ms")
	b.ReportMetric(0, "ns/op")
	if st := e.srv.RealtimeStats(); st.Wakes != 0 {
		b.Fatalf("wakes during the benchmark: %+v", st)
	}
}

// rtCPU is the process's CPU time (user+system): with the clients in the
// child, the server's cost, which the machine's load does not inflate.
func rtCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRealtimeIdleSocketMemory reports the server's bytes per idle
// socket; see the file comment for the method.
func BenchmarkRealtimeIdleSocketMemory(b *testing.B) {
	b.Run("plain", func(b *testing.B) { benchIdleSocketMemory(b, false) })
	// Sockets that negotiated permessage-deflate hold nothing more: no
	// compressor state is kept between messages.
	b.Run("deflate", func(b *testing.B) { benchIdleSocketMemory(b, true) })
}

func benchIdleSocketMemory(b *testing.B, deflate bool) {
	rtRaiseNoFile(b, 2*rtBenchSockets+256)
	e := newRTEnv(b)
	e.deflateChild = deflate
	e.peer("bob", "b1").push("c0", rtTask{id: "t0", project: "p1"})
	e.rtRegister(b, rtBenchSockets, "k")
	// One measurement whatever b.N: each costs a child process and 1,000
	// connections, and the figure does not depend on repetition.
	heap, stack, gs := rtMeasureIdle(b, e, rtBenchSockets)
	b.ReportMetric(float64(heap+stack)/rtBenchSockets, "B/socket")
	b.ReportMetric(float64(heap)/rtBenchSockets, "heap-B/socket")
	b.ReportMetric(float64(stack)/rtBenchSockets, "stack-B/socket")
	b.ReportMetric(float64(gs)/rtBenchSockets, "goroutines/socket")
	b.ReportMetric(0, "ns/op")
}

func rtMemNow() (heap, stack int64, goroutines int) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse), int64(ms.StackInuse), runtime.NumGoroutine()
}

// rtChild is this test binary re-executed as the clients of a benchmark.
type rtChild struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	e     *rtEnv
}

// rtStartChild starts the child in a mode ("idle" or "fanout") and waits
// until its n sockets said hello.
func rtStartChild(b *testing.B, e *rtEnv, mode string, n int) *rtChild {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRealtimeBenchChild$", "-test.v")
	cmd.Env = append(os.Environ(), "RT_CHILD_URL="+e.wsURL(""), "RT_CHILD_N="+strconv.Itoa(n), "RT_CHILD_MODE="+mode)
	if e.deflateChild {
		cmd.Env = append(cmd.Env, "RT_CHILD_DEFLATE=1")
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	c := &rtChild{cmd: cmd, stdin: stdin, lines: make(chan string, 64), e: e}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "RT-") {
				c.lines <- sc.Text()
			}
		}
	}()
	c.wait(b, "RT-READY")
	if got := e.srv.RealtimeStats().Sessions; got != int64(n) {
		b.Fatalf("%d sessions, want %d", got, n)
	}
	return c
}

func (c *rtChild) send(b *testing.B, line string) {
	if _, err := io.WriteString(c.stdin, line+"\n"); err != nil {
		b.Fatal(err)
	}
}

// wait returns the child's next RT- line, which must start with prefix.
func (c *rtChild) wait(b *testing.B, prefix string) string {
	b.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok {
			b.Fatalf("the child ended while waiting for %s", prefix)
		}
		if !strings.HasPrefix(l, prefix) {
			b.Fatalf("child: %s (waiting for %s)", l, prefix)
		}
		return l
	case <-time.After(2 * time.Minute):
		b.Fatalf("the child did not say %s", prefix)
	}
	return ""
}

func (c *rtChild) stop() {
	_ = c.stdin.Close()
	_ = c.cmd.Wait()
}

// rtMeasureIdle connects n sockets from a child process and returns the
// server's heap, stack and goroutine growth.
func rtMeasureIdle(b *testing.B, e *rtEnv, n int) (heap, stack int64, goroutines int) {
	profile := os.Getenv("RT_MEM_PROFILE")
	if profile != "" {
		runtime.MemProfileRate = 1
		defer func() { runtime.MemProfileRate = 512 * 1024 }()
	}
	h0, s0, g0 := rtMemNow()
	ch := rtStartChild(b, e, "idle", n)
	defer func() {
		ch.stop()
		eventually(b, "the child's sockets closed", func() bool { return e.srv.RealtimeStats().Sessions == 0 })
	}()
	h1, s1, g1 := rtMemNow()
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			b.Fatal(err)
		}
		_ = pprof.Lookup("heap").WriteTo(f, 0)
		_ = f.Close()
	}
	return h1 - h0, s1 - s0, g1 - g0
}

// TestRealtimeBenchChild is the client side of the benchmarks, run in a
// child process: it connects RT_CHILD_N sockets, reads each hello and says
// RT-READY. In "idle" mode it holds the sockets until its stdin closes. In
// "fanout" mode it stamps each delta as its read returns ("fanout-ack":
// and acks it); for every
// "ack <seq> <sentNs> <ackedNs>" line it says "RT-DONE <seq>" once every
// socket read that commit, and on "end" it says "RT-RESULT p50 p90 p99 max
// p99-from-push-start" in milliseconds.
func TestRealtimeBenchChild(t *testing.T) {
	base := os.Getenv("RT_CHILD_URL")
	if base == "" {
		t.Skip("the child process of the realtime benchmarks")
	}
	n, _ := strconv.Atoi(os.Getenv("RT_CHILD_N"))
	fail := func(err error) {
		fmt.Println("RT-FAIL", err)
		os.Exit(1)
	}
	socks := make([]*rtSock, n)
	for i := range n {
		d := rtDialer("alice")
		if os.Getenv("RT_CHILD_DEFLATE") != "" {
			// Chrome's offer: the sockets negotiate permessage-deflate.
			d.Extensions = []httphead.Option{wsflate.Parameters{ClientMaxWindowBits: 1}.Option()}
		}
		s, err := rtDial(context.Background(), d, base+"k"+strconv.Itoa(i), 4)
		if err != nil {
			fail(err)
		}
		socks[i] = s
		s.startReading()
	}
	for _, s := range socks {
		select {
		case m := <-s.in:
			ev, err := wire.ParseServerEvent(m.data)
			if err != nil {
				fail(err)
			}
			if h, ok := ev.(wire.Hello); !ok || h.RequiresSync {
				fail(fmt.Errorf("first message %+v", ev))
			}
		case <-s.done:
			fail(s.endErr)
		case <-time.After(time.Minute):
			fail(fmt.Errorf("no hello"))
		}
	}
	fmt.Println("RT-READY")
	mode := os.Getenv("RT_CHILD_MODE")
	if mode != "fanout" && mode != "fanout-ack" {
		_, _ = io.Copy(io.Discard, os.Stdin)
		return
	}
	var lat, fromSend []time.Duration
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var seq, sentNs, ackNs int64
		if in.Text() == "end" {
			break
		}
		if _, err := fmt.Sscanf(in.Text(), "ack %d %d %d", &seq, &sentNs, &ackNs); err != nil {
			fail(err)
		}
		for _, s := range socks {
			var m rtMsg
			select {
			case m = <-s.in:
			case <-time.After(rtWait):
				fail(fmt.Errorf("no delta %d", seq))
			}
			if m.op == 0 || len(m.data) == 0 || m.data[0] != wire.ChannelTagDelta {
				fail(fmt.Errorf("got %v, want delta %d", m, seq))
			}
			lat = append(lat, max(0, m.at.Sub(time.Unix(0, ackNs))))
			fromSend = append(fromSend, m.at.Sub(time.Unix(0, sentNs)))
			if mode == "fanout-ack" {
				if err := s.write(ws.OpText, wire.Ack{Cursor: seq}.AppendJSON(nil)); err != nil {
					fail(err)
				}
			}
		}
		fmt.Println("RT-DONE", seq)
	}
	slices.Sort(lat)
	slices.Sort(fromSend)
	fmt.Printf("RT-RESULT %g %g %g %g %g\n", rtPercentile(lat, 0.5), rtPercentile(lat, 0.9), rtPercentile(lat, 0.99),
		rtPercentile(lat, 1), rtPercentile(fromSend, 0.99))
	_, _ = io.Copy(io.Discard, os.Stdin)
}
