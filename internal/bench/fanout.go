package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncgo/syncgo/internal/sspclient"
)

// deliveries collects, per commitSeq, when each socket received its
// delta, and signals when all sockets have.
type deliveries struct {
	mu   sync.Mutex
	want int
	seqs map[int64]*delivery
}

type delivery struct {
	arrivals []time.Time
	// rx holds the kernel's receive times of the same deliveries, where
	// recorded.
	rx  []time.Time
	all chan struct{}
	// counted is how many arrivals the wait returned.
	counted int
}

func (d *deliveries) entry(seq int64) *delivery {
	e := d.seqs[seq]
	if e == nil {
		e = &delivery{all: make(chan struct{})}
		d.seqs[seq] = e
	}
	return e
}

func (d *deliveries) got(seq int64, at, rx time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.entry(seq)
	e.arrivals = append(e.arrivals, at)
	if !rx.IsZero() {
		e.rx = append(e.rx, rx)
	}
	if len(e.arrivals) == d.want {
		close(e.all)
	}
}

// wait returns the arrivals of seq (and their kernel receive times) once
// every socket has it, or at the deadline.
func (d *deliveries) wait(seq int64, within time.Duration) (arrivals, rx []time.Time) {
	d.mu.Lock()
	e := d.entry(seq)
	d.mu.Unlock()
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-e.all:
	case <-t.C:
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	e.counted = len(e.arrivals)
	return append([]time.Time(nil), e.arrivals...), append([]time.Time(nil), e.rx...)
}

// spreadOf appends each time's distance from the earliest of them.
func spreadOf(out []time.Duration, times []time.Time) []time.Duration {
	if len(times) == 0 {
		return out
	}
	first := times[0]
	for _, t := range times {
		if t.Before(first) {
			first = t
		}
	}
	for _, t := range times {
		out = append(out, t.Sub(first))
	}
	return out
}

// runFanout: Sockets subscribed sockets and one writer pushing Commits
// one-upsert commits one at a time, each after the previous one reached
// every socket. Figures: the delivery latency from the push response to
// each socket receiving the delta (a delta that arrives before the
// response counts as 0, and is counted), from the push request, and from
// the first socket's delivery of the same commit (the fan-out spread,
// which leaves out the commit's own latency). The spread is measured twice:
// by when the tool's goroutines read the deltas (which includes the wait
// for a CPU the tool shares with the server) and, on Linux, by when the
// kernel received them (SO_TIMESTAMPNS: the server's fan-out as it reaches
// the client machine).
func runFanout(ctx context.Context, r *runner) error {
	n, commits := r.cfg.Sockets, r.cfg.Commits
	r.res.Params["sockets"], r.res.Params["commits"] = n, commits
	d := &deliveries{want: n, seqs: map[int64]*delivery{}}
	if !r.cfg.SocketGoroutines {
		r.startPollers()
	}
	r.res.Params["socket readers"] = "goroutine per socket"
	if len(r.pollers) > 0 {
		r.res.Params["socket readers"] = fmt.Sprintf("%d epoll readers", len(r.pollers))
	}
	if r.cfg.WSDeflate {
		r.res.Params["permessage-deflate"] = "negotiated on every socket"
	}
	inflated0 := r.sockets.inflated.Load()
	// Per socket: the deltas it applied and the last one's cursor (a
	// socket that missed a delivery is reported with them).
	perSock := make([]struct{ deltas, last atomic.Int64 }, n)
	socks, err := r.openSockets(ctx, n, func(s *vsocket, cursor int64, at, rx time.Time) {
		perSock[s.i].deltas.Add(1)
		perSock[s.i].last.Store(cursor)
		d.got(cursor, at, rx)
	})
	defer closeSockets(socks)
	if err != nil {
		return err
	}
	w, err := r.client(0, sspclient.Options{})
	if err != nil {
		return err
	}
	if _, err := w.Sync(ctx); err != nil {
		return fmt.Errorf("writer: %w", err)
	}
	within := min(r.cfg.Timeout, 5*time.Second)
	var (
		fromResp, fromSend, spread, spreadResp, rxSpread, push []time.Duration
		early, missed                                          int
		pushed                                                 atomic.Int64
		rec                                                    recorder
	)
	line := &rateLine{what: "fanout", unit: "commits"}
	r.status(func(el time.Duration) string {
		_, p99 := rec.takeWindow()
		return line.render(el, int(pushed.Load()), p99)
	})
	wakes0 := r.sockets.wakes.Load()
	// The CPU of the commits' phase alone (the registrations and connects
	// left out), per delivered delta.
	srv0, srvErr := readCPUSeconds(r.pid)
	self0 := selfCPUSeconds()
	for k := range commits {
		if err := r.upsertN(w, "f"+r.cfg.Scope, r.cfg.Scope, k, 1, 0, false); err != nil {
			return err
		}
		sent := time.Now()
		res, err := w.Push(ctx)
		resp := time.Now()
		if err != nil {
			return r.fail(fmt.Errorf("writer push: %w", err))
		}
		_, seq := r.checkPushed(res)
		if seq == 0 {
			continue
		}
		pushed.Add(1)
		push = append(push, resp.Sub(sent))
		arrivals, rx := d.wait(seq, within)
		missed += n - len(arrivals)
		if len(rx) == len(arrivals) {
			rxSpread = spreadOf(rxSpread, rx)
		}
		spread = spreadOf(spread, arrivals)
		first := resp // the reading of rounds one to six: from the push response when it came first
		for _, at := range arrivals {
			if at.Before(first) {
				first = at
			}
		}
		for _, at := range arrivals {
			spreadResp = append(spreadResp, at.Sub(first))
			lat := at.Sub(resp)
			if lat < 0 {
				early++
				lat = 0
			}
			fromResp = append(fromResp, lat)
			fromSend = append(fromSend, at.Sub(sent))
			rec.add(lat)
		}
	}
	selfCPU := selfCPUSeconds() - self0
	// Sockets that ended during the run (the server closed them, a read
	// failed): each misses every later commit.
	ended := 0
	var why []string
	for _, s := range socks {
		select {
		case <-s.done:
			if ended < 5 {
				why = append(why, fmt.Sprintf("socket %d: %s", s.i, s.endWhy))
			}
			ended++
		default:
		}
	}
	if ended > 0 {
		r.res.Params["sockets ended"] = why
	}
	// Deliveries that came after their commit's wait ended (late, not
	// lost), and the sockets that missed any: whether their cursor still
	// reached the last commit says late or lost.
	late := 0
	d.mu.Lock()
	for _, e := range d.seqs {
		late += len(e.arrivals) - e.counted
	}
	d.mu.Unlock()
	if missed > 0 {
		var short []string
		for i := range perSock {
			ps := &perSock[i]
			if got := ps.deltas.Load(); got < pushed.Load() && len(short) < 5 {
				short = append(short, fmt.Sprintf("socket %d: %d of %d deltas, the last at cursor %d, subscription cursor %d",
					i, got, pushed.Load(), ps.last.Load(), socks[i].cursor()))
			}
		}
		r.res.Params["sockets that missed deliveries"] = short
	}
	srv1, srvErr1 := readCPUSeconds(r.pid)
	r.errors.Add(int64(missed))
	if len(fromResp) > 0 {
		r.res.add("bench tool CPU per delivery (commits phase)", selfCPU/float64(len(fromResp))*1e6, "µs")
		if r.pid > 0 && srvErr == nil && srvErr1 == nil {
			r.res.add("server CPU per delivery (commits phase)", (srv1-srv0)/float64(len(fromResp))*1e6, "µs")
		}
	}
	r.res.add("commits", float64(pushed.Load()), "")
	r.res.add("deliveries", float64(len(fromResp)), "")
	r.res.addLatency("delivery latency from push response", summarize(fromResp))
	r.res.addLatency("delivery latency from push request", summarize(fromSend))
	r.res.addLatency("delivery spread after the first socket", summarize(spread))
	r.res.addLatency("delivery spread after the first socket or the push response", summarize(spreadResp))
	if len(rxSpread) > 0 {
		r.res.addLatency("delivery spread after the first socket, kernel receive time", summarize(rxSpread))
	}
	r.res.add("deliveries before push response", float64(early), "")
	r.res.add("deliveries missed", float64(missed), "")
	r.res.add("sockets ended during the run", float64(ended), "")
	r.res.add("deliveries late (after their commit's wait)", float64(late), "")
	r.res.add("wake-ups", float64(r.sockets.wakes.Load()-wakes0), "")
	if r.cfg.WSDeflate && len(r.pollers) > 0 {
		r.res.add("compressed messages inflated", float64(r.sockets.inflated.Load()-inflated0), "")
	}
	r.res.addMs("push latency p50", summarize(push).P50)
	return nil
}
