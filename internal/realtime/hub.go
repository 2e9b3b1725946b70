package realtime

import (
	"bufio"
	"context"
	"hash/maphash"
	"log/slog"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unique"

	"github.com/gobwas/ws"

	"github.com/syncgo/syncgo/internal/engine"
	"github.com/syncgo/syncgo/internal/memfree"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// BodyBudget bounds the bytes of request bodies held at once.
type BodyBudget interface {
	// TakeBody reserves n bytes, or reports false when they would take
	// the total over the budget.
	TakeBody(n int64) bool
	// GiveBody returns n bytes reserved before.
	GiveBody(n int64)
}

// Config configures a Hub. Zero fields take the defaults of withDefaults.
type Config struct {
	Engine *engine.Engine
	Store  store.Store
	Logger *slog.Logger
	// Now is the server clock in Unix milliseconds.
	Now func() int64
	// Heartbeat is the interval of heartbeat events (§8.5): a socket
	// hears a frame at least this often, a heartbeat when no other frame
	// was sent to it. Default 30 s.
	Heartbeat time.Duration
	// QueueMessages and QueueBytes bound a connection's send queue.
	// Defaults 256 messages, 1 MiB.
	QueueMessages int
	QueueBytes    int
	// WriteTimeout bounds one socket write; a consumer that cannot take a
	// write in time is closed. Default 10 s.
	WriteTimeout time.Duration
	// MaxMessageBytes bounds a client message (a round's request).
	// Default 32 MiB.
	MaxMessageBytes int64
	// StallTimeout: a client message that has begun must make progress
	// (some bytes arrive) at least this often, or the socket is closed.
	// Between messages a socket may be silent. Default 30 s.
	StallTimeout time.Duration
	// MaxDeltaBytes: a larger delta is replaced by a delta-too-large wake.
	// Default 1 MiB.
	MaxDeltaBytes int
	// MaxPresenceBytes caps a presence document (§8.6.2). Default 16 KiB.
	MaxPresenceBytes int
	// AckFlush is how often acknowledged cursors are persisted. Default
	// 500 ms.
	AckFlush time.Duration
	// AckFlushAcks is about the most acks one flush persists. With more
	// sessions holding an ack not yet persisted, the sessions are split
	// into stripes (by a hash of the session) and each flush persists one
	// stripe's acks: a session's acknowledged cursor is then persisted
	// every few AckFlush intervals instead of every one. A cursor
	// persisted late only makes a reconnecting client pull what it
	// already has (§8.2: the client's own cursor is what it pulls from);
	// a socket's last ack is persisted when it closes, every session's
	// when the hub closes. Default 1,000.
	AckFlushAcks int
	// AckFlushSpread is the most stripes. A cycle of as many flushes
	// persists each stripe once, so an ack waits at most two cycles:
	// 2*AckFlushSpread flushes. Default 10 (at most 10 s at the default
	// AckFlush).
	AckFlushSpread int
	// ReorderWait is how long fan-out waits for a missing commit
	// notification before treating it as a gap. Default 50 ms.
	ReorderWait time.Duration
	// QuietSweep is how often a hub that listens to a shared store
	// (Listen) looks for commits never announced to it in partitions that
	// have had no notification for that long: a process that died between
	// a commit and its notification leaves it to the partition's next
	// commit, which a quiet partition may not have. Default 5 s.
	QuietSweep time.Duration
	// ReresolveInterval is how often every socket's scopes are resolved
	// again, narrowing its registrations to what is still granted.
	// Default 60 s; negative disables the periodic pass.
	ReresolveInterval time.Duration
	// ReresolveOn, when set, says whether a commit changes what the
	// resolver grants (it writes a table that grant queries read): every
	// socket of the partition is resolved again before the commit is
	// fanned out.
	ReresolveOn func(engine.CommitNotice) bool
	// PrepareResolve, when set, is called before a pass resolves many
	// sockets again with their actors (partition → actor ids, repeats
	// possible); the context it returns is passed to each resolution, so
	// that what they share is read once.
	PrepareResolve func(ctx context.Context, actors map[string][]string) context.Context
	// Admit, when set, admits a socket round under the same cap as POST
	// /sync requests: it returns the slot's release, or a refusal
	// (sync.rate_limited) that the round answers with an ERROR frame.
	Admit func(ctx context.Context, auth engine.Auth) (release func(), refusal error)
	// Bodies, when set, bounds with the HTTP request bodies the bytes of
	// client messages and round requests held at once, past the first
	// 64 KiB of each: a socket whose next message or round would take
	// the total over it is closed with 1013 (try again later), and the
	// client reconnects and sends it again.
	Bodies BodyBudget
	// ReaderPerSocket keeps a reader goroutine (and its read buffer) on
	// every socket for its lifetime, as on systems without epoll. By
	// default, on Linux, an idle socket is parked in the hub's epoll set
	// and gets a reader only while client bytes arrive.
	ReaderPerSocket bool
	// ReleaseAfterChurn: after a burst of at least this many socket
	// connects and disconnects, once no socket has come or gone for
	// half a second, the hub asks Releaser to return the process's free
	// memory to the system. A connect storm's garbage (each upgrade's
	// HTTP buffers) otherwise stays resident until the runtime's
	// scavenger slowly returns it. Default 500; negative disables.
	ReleaseAfterChurn int
	// Releaser releases the memory, spaced by its cost, for the hub and
	// the rest of the server alike. Nil: the hub makes its own, with a
	// least spacing of 1 s.
	Releaser *memfree.Releaser
}

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = func() int64 { return time.Now().UnixMilli() }
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = 30 * time.Second
	}
	if c.QueueMessages <= 0 {
		c.QueueMessages = 256
	}
	if c.QueueBytes <= 0 {
		c.QueueBytes = 1 << 20
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = 32 << 20
	}
	if c.StallTimeout <= 0 {
		c.StallTimeout = 30 * time.Second
	}
	if c.MaxDeltaBytes <= 0 {
		c.MaxDeltaBytes = 1 << 20
	}
	if c.MaxPresenceBytes <= 0 {
		c.MaxPresenceBytes = 16 << 10
	}
	if c.AckFlush <= 0 {
		c.AckFlush = 500 * time.Millisecond
	}
	if c.AckFlushAcks <= 0 {
		c.AckFlushAcks = 1000
	}
	if c.AckFlushSpread <= 0 {
		c.AckFlushSpread = 10
	}
	if c.QuietSweep <= 0 {
		c.QuietSweep = 5 * time.Second
	}
	if c.ReorderWait <= 0 {
		c.ReorderWait = 50 * time.Millisecond
	}
	if c.ReresolveInterval == 0 {
		c.ReresolveInterval = time.Minute
	}
	if c.ReleaseAfterChurn == 0 {
		c.ReleaseAfterChurn = 500
	}
	if c.ReleaseAfterChurn < 0 {
		c.Releaser = nil
	}
	return c
}

// Stats counts the hub's activity; drops are counted by reason.
type Stats struct {
	// Sessions is the number of connected sockets.
	Sessions int64
	// Deltas and Wakes count the delta messages and wake-ups queued.
	Deltas int64
	Wakes  int64
	// DropsQueueFull counts deltas replaced by a wake because the
	// socket's send queue was full (a slow consumer).
	DropsQueueFull int64
	// DropsTooLarge counts deltas over MaxDeltaBytes, replaced by a
	// delta-too-large wake.
	DropsTooLarge int64
	// DropsUnencodable counts deltas that could not be encoded (a value
	// the wire cannot carry, a row an older client's layout cannot
	// hold), replaced by a catch-up wake: the client's pull decides.
	DropsUnencodable int64
	// DropsBehind counts matching commits answered with a wake because
	// the session was behind: at connect, after a drop, or after a gap in
	// the notification sequence.
	DropsBehind int64
	// DropsInRound counts matching commits answered with a wake because
	// a sync round's response was in flight on the socket.
	DropsInRound int64
	// ClosedSlow counts sockets closed because they took no write for
	// WriteTimeout or could not take even a wake-up.
	ClosedSlow int64
	// ClosedProtocol counts sockets closed for a protocol violation.
	ClosedProtocol int64
	// ClosedBusy counts sockets closed (1013) because a message or round
	// did not fit in the body budget (Config.Bodies).
	ClosedBusy int64
	// NotificationGap counts commit notifications given up on.
	NotificationGap int64
	// Narrowed counts the times a socket's registrations were narrowed or
	// dropped because its actor's scopes were resolved to fewer.
	Narrowed int64
	// MemoryReleases counts the memory releases after bursts of socket
	// connects and disconnects (Config.ReleaseAfterChurn): Releaser's
	// count for memfree.Connections.
	MemoryReleases int64
	// ListenerConnects counts the times the commit listener of a shared
	// store began listening (its first connect and each reconnect) and
	// the partitions with sessions were checked for commits missed
	// meanwhile.
	ListenerConnects int64
	// Compressed counts the messages compressed for sockets that
	// negotiated permessage-deflate: a delta fanned out to many such
	// sockets is compressed once.
	Compressed int64
	// ListenerUp is whether that commit listener is connected and
	// listening now: while it is not, commits of other instances reach
	// this one's sockets only on their clients' next pull.
	ListenerUp bool
}

type counters struct {
	sessions, deltas, wakes, dropsQueueFull, dropsTooLarge, dropsUnencodable, dropsBehind, dropsInRound,
	closedSlow, closedProtocol, closedBusy, gaps, narrowed, listenerConnects atomic.Int64
	// listenerUp: the commit listener is connected (Listen).
	listenerUp atomic.Bool
}

// churnQuiet is how long no socket comes or goes before a burst of them is
// over.
const churnQuiet = 500 * time.Millisecond

// AddChurn counts n connections opened or closed besides the hub's own
// sockets (a server's plain HTTP connections) toward ReleaseAfterChurn's
// bursts.
func (h *Hub) AddChurn(n int64) { h.churn.Add(n) }

// Heartbeat is the heartbeat interval in effect (Config.Heartbeat or its
// default), for other sockets of the server that keep the same pace.
func (h *Hub) Heartbeat() time.Duration { return h.cfg.Heartbeat }

// pooledReaders is how many idle read buffers the hub keeps for the
// reader goroutines of polled sockets.
const pooledReaders = 64

// Hub holds the connected sessions and fans commits out to them.
type Hub struct {
	cfg   Config
	stats counters
	// hooks are set by this package's tests only (nil otherwise), to
	// hold goroutines at points of a race.
	hooks struct {
		readPolled func(taken bool) // a reader of a polled socket starts
		roundEnd   func()           // a round's end checks for pipelining
	}

	mu     sync.Mutex
	parts  map[string]*partition
	closed bool

	stop chan struct{}
	wg   sync.WaitGroup // the hub's loops
	// pollDone is closed when the poller's goroutine has returned.
	pollDone chan struct{}

	// poll parks idle sockets (nil: a reader goroutine per socket);
	// readers is a free list of read buffers for the polled sockets'
	// reader goroutines.
	poll    *poller
	readers chan *bufio.Reader
	// z compresses and inflates the messages of the sockets that
	// negotiated permessage-deflate (Conn.Deflate).
	z codec
	// polledReaders counts the reader goroutines started for polled
	// sockets (acks are read by the poller itself, without one).
	polledReaders atomic.Int64
	// churn counts socket attaches and detaches (and AddChurn's).
	churn atomic.Int64
	// ownReleaser: cfg.Releaser is the hub's own, closed with it.
	ownReleaser bool

	// ackSeed hashes sessions into the ack flush's stripes; ackStripes
	// (at least 1), ackTurn (the stripe the next flush persists) and
	// ackCycleAcks (the acks persisted since turn 0) are the loop
	// goroutine's (flushAcks).
	ackSeed      maphash.Seed
	ackStripes   int
	ackTurn      int
	ackCycleAcks int

	// beforeFanout, when set (by tests, before the first notification),
	// runs on the fan-out goroutine before a commit is delivered: a test
	// holds it to deliver a commit late, after the round it was made in.
	beforeFanout func(engine.CommitNotice)
}

// notified is a commit notification queued for fan-out, with what was
// decided when the hub learned of it.
type notified struct {
	engine.CommitNotice
	// rounds holds the sessions that had a sync round's response in flight
	// when the commit was notified (§8.7 interleaving), with whether it
	// matched their registrations (they were woken then). Decided at
	// notify time: the fan-out may reach a session after its round ended.
	rounds map[*session]bool
}

// partition is the sessions and fan-out state of one partition.
type partition struct {
	mu       sync.Mutex
	id       string
	sessions map[*session]struct{}
	// byClient indexes sessions by clientId (OnResolve looks a client's
	// sockets up on every sync request it makes).
	byClient map[string][]*session
	presence map[string]map[peerID]presenceEntry
	// seq orders notifications: next is the sequence fan-out expects.
	next    int64
	pending map[int64]notified
	// noticed is when the partition's last notification came (Notify,
	// or a remote one): the quiet sweep reads the heads of the others.
	noticed time.Time
	timer   *time.Timer
	// outbox holds notifications ready for fan-out, in order; one
	// goroutine at a time drains it, so every session sees commits in
	// sequence order whoever notified them.
	outbox     []notified
	delivering bool
	// gone: the hub forgot the partition (forget); a goroutine that
	// looked it up before looks it up again.
	gone bool
}

// idleLocked reports whether the partition holds nothing: no session, no
// notification waiting or being delivered, no presence. p.mu is held.
func (p *partition) idleLocked() bool {
	return len(p.sessions) == 0 && len(p.pending) == 0 && len(p.outbox) == 0 && !p.delivering &&
		p.timer == nil && len(p.presence) == 0
}

// forget drops the state of a partition left idle, so that the hub keeps
// state only for the partitions with sockets (or notifications in
// flight), not for every partition that ever had one: a multi-tenant
// server's tenants come and go. A partition forgotten starts over as one
// never seen: its next socket takes the notification sequence from the
// store when it starts, as its first one did, and a commit notified while
// it has no socket concerns nobody.
func (h *Hub) forget(p *partition) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone || !p.idleLocked() || h.parts[p.id] != p {
		return
	}
	p.gone = true
	delete(h.parts, p.id)
}

// NewHub returns a Hub and starts its heartbeat and ack flusher.
func NewHub(cfg Config) *Hub {
	h := &Hub{cfg: cfg.withDefaults(), parts: map[string]*partition{}, stop: make(chan struct{}),
		ackSeed: maphash.MakeSeed(), ackStripes: 1}
	if h.cfg.ReleaseAfterChurn > 0 && h.cfg.Releaser == nil {
		h.cfg.Releaser, h.ownReleaser = memfree.New(time.Second, nil), true
	}
	if !h.cfg.ReaderPerSocket {
		if h.poll = newPoller(); h.poll != nil {
			h.readers = make(chan *bufio.Reader, pooledReaders)
			h.pollDone = make(chan struct{})
			go func() {
				defer close(h.pollDone)
				h.poll.run(h.readable)
			}()
		}
	}
	h.wg.Add(1)
	go h.loop()
	if h.cfg.ReresolveInterval > 0 {
		h.wg.Add(1)
		go h.reresolveLoop()
	}
	return h
}

// Stats returns a snapshot of the hub's counters.
func (h *Hub) Stats() Stats {
	s := &h.stats
	return Stats{Sessions: s.sessions.Load(), Deltas: s.deltas.Load(), Wakes: s.wakes.Load(),
		DropsQueueFull: s.dropsQueueFull.Load(), DropsTooLarge: s.dropsTooLarge.Load(),
		DropsUnencodable: s.dropsUnencodable.Load(),
		DropsBehind:      s.dropsBehind.Load(), DropsInRound: s.dropsInRound.Load(),
		ClosedSlow: s.closedSlow.Load(), ClosedProtocol: s.closedProtocol.Load(), ClosedBusy: s.closedBusy.Load(),
		NotificationGap: s.gaps.Load(), Narrowed: s.narrowed.Load(), MemoryReleases: h.cfg.Releaser.Released(memfree.Connections),
		ListenerConnects: s.listenerConnects.Load(), ListenerUp: s.listenerUp.Load(), Compressed: h.z.compressed.Load()}
}

// Partitions is the number of partitions the hub keeps state for.
func (h *Hub) Partitions() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.parts)
}

func (h *Hub) part(id string, create bool) *partition {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.parts[id]
	if p == nil && create {
		p = &partition{id: id, sessions: map[*session]struct{}{}, byClient: map[string][]*session{},
			presence: map[string]map[peerID]presenceEntry{},
			pending:  map[int64]notified{}}
		h.parts[id] = p
	}
	return p
}

// lockPart returns the partition's state locked (p.mu held), created
// when create is set and the hub keeps none, or nil. A partition
// forgotten between the lookup and the lock (forget) is looked up again.
func (h *Hub) lockPart(id string, create bool) *partition {
	for {
		p := h.part(id, create)
		if p == nil {
			return nil
		}
		p.mu.Lock()
		if !p.gone {
			return p
		}
		p.mu.Unlock()
	}
}

// addLocked and removeLocked add a session to the partition and remove
// it. p.mu is held.
func (p *partition) addLocked(s *session) {
	p.sessions[s] = struct{}{}
	p.byClient[s.clientID] = append(p.byClient[s.clientID], s)
}

func (p *partition) removeLocked(s *session) {
	if _, ok := p.sessions[s]; !ok {
		return
	}
	delete(p.sessions, s)
	list := p.byClient[s.clientID]
	for i, o := range list {
		if o == s {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(p.byClient, s.clientID)
	} else {
		p.byClient[s.clientID] = list
	}
}

func (h *Hub) sessionsOf(p *partition) []*session {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*session, 0, len(p.sessions))
	for s := range p.sessions {
		out = append(out, s)
	}
	return out
}

func (h *Hub) allSessions() []*session {
	h.mu.Lock()
	parts := make([]*partition, 0, len(h.parts))
	for _, p := range h.parts {
		parts = append(parts, p)
	}
	h.mu.Unlock()
	var out []*session
	for _, p := range parts {
		out = append(out, h.sessionsOf(p)...)
	}
	return out
}

func (h *Hub) loop() {
	defer h.wg.Done()
	// Ticks at half the heartbeat interval: a socket gets a heartbeat at
	// the second tick with no frame queued on it (wsConn.beatDue). A
	// heartbeat under 2 ms ticks every millisecond (half of 1ns is no
	// interval, which NewTicker refuses with a panic).
	hb := time.NewTicker(max(h.cfg.Heartbeat/2, time.Millisecond))
	ack := time.NewTicker(h.cfg.AckFlush)
	defer hb.Stop()
	defer ack.Stop()
	var quiet <-chan time.Time
	if h.cfg.ReleaseAfterChurn > 0 {
		t := time.NewTicker(churnQuiet)
		defer t.Stop()
		quiet = t.C
	}
	var lastChurn, burst int64
	for {
		select {
		case <-quiet:
			c := h.churn.Load()
			if c != lastChurn {
				burst += c - lastChurn
				lastChurn = c
				continue
			}
			if burst >= int64(h.cfg.ReleaseAfterChurn) {
				// Too soon after the last release, the releaser
				// defers it (a storm's reconnects and then its
				// clients leaving are two bursts a few seconds
				// apart).
				h.cfg.Releaser.Request(memfree.Connections)
			}
			burst = 0
		case <-h.stop:
			h.flushAcks(true)
			return
		case <-hb.C:
			now := h.cfg.Now()
			f := textFrame(wire.Heartbeat{Timestamp: now}.AppendJSON(nil))
			for _, s := range h.allSessions() {
				if !s.ready() {
					// Starting: hello goes first (a close here would
					// drop it); Attach's expiry timer follows it.
					continue
				}
				if s.expired(time.Now()) {
					s.conn.closeWith(ws.StatusPolicyViolation, "credentials expired")
					continue
				}
				if s.conn.stalledPartial(time.Now(), h.cfg.StallTimeout) {
					// A frame begun and left unfinished: a reader
					// applies the stall timeout to the rest of it.
					h.wakeReader(s)
				}
				if s.conn.beatDue() {
					_ = s.conn.send(f) // a full queue skips a heartbeat: data is pending anyway
				}
			}
		case <-ack.C:
			h.flushAcks(false)
		}
	}
}

// flushAcks persists the sessions' acknowledged cursors (§8.2): coalesced
// per session, monotonic in the store. A store that applies many acks in
// one write (SQLite, Postgres) gets them per partition, ackBatch at a time:
// a flush of 10,000 sockets' acks is 20 writes, not 10,000 (each a
// savepoint, a read of the partition's epoch and a commit of its own), and
// the CPU burst it makes every AckFlush, beside the fan-outs, is that much
// shorter (on Postgres one statement per batch: a 1,000-socket fan-out
// run's backends' CPU 4.1-4.7 s with one ack per statement, 2.5-2.7 s
// batched). Another store gets one ack per write, one after the other
// (four in flight on Postgres, before it batched, doubled the backends'
// CPU of a fan-out run: measured in round seven).
//
// With more than AckFlushAcks sessions holding an ack, a flush persists
// one stripe of them (Config.AckFlushAcks): the sessions are hashed into
// stripes, a cycle of as many flushes persists each stripe once, and the
// number of stripes of the next cycle is the acks of this one over
// AckFlushAcks (at most AckFlushSpread), so a session's ack waits at most
// two cycles. At 10,000 acking sockets every cursor written every 500 ms
// was 20,000 updates a second, the SQLite writer a third of the server's
// CPU in a fan-out. all persists every session's ack (the hub closing).
func (h *Hub) flushAcks(all bool) {
	type pending struct {
		partition string
		advance   store.CursorAdvance
	}
	var acks []pending
	now := h.cfg.Now()
	stripes, turn := 1, 0
	if !all {
		stripes, turn = h.ackStripes, h.ackTurn
	}
	for _, s := range h.allSessions() {
		if stripes > 1 && maphash.Comparable(h.ackSeed, s)%uint64(stripes) != uint64(turn) {
			continue
		}
		if a, ok := s.takeAck(now); ok {
			acks = append(acks, pending{s.auth.Partition, a})
		}
	}
	if !all {
		// A cycle of flushes visits every stripe once; the next cycle's
		// stripes follow from the acks this one persisted.
		h.ackCycleAcks += len(acks)
		if h.ackTurn++; h.ackTurn >= h.ackStripes {
			h.ackStripes = min(max(1, (h.ackCycleAcks+h.cfg.AckFlushAcks-1)/h.cfg.AckFlushAcks), h.cfg.AckFlushSpread)
			h.ackTurn, h.ackCycleAcks = 0, 0
		}
	}
	ctx := context.Background()
	if b, ok := h.cfg.Store.(store.CursorBatchAdvancer); ok {
		byPart := map[string][]store.CursorAdvance{}
		for _, a := range acks {
			byPart[a.partition] = append(byPart[a.partition], a.advance)
		}
		for part, advances := range byPart {
			for len(advances) > 0 {
				n := min(len(advances), ackBatch)
				if _, err := b.AdvanceClientCursors(ctx, part, advances[:n]); err != nil {
					h.cfg.Logger.Debug("acks not persisted", "partition", part, "acks", n, "err", err)
				}
				advances = advances[n:]
			}
		}
		return
	}
	for _, a := range acks {
		if _, err := h.cfg.Store.AdvanceClientCursor(ctx, a.partition, a.advance); err != nil {
			h.cfg.Logger.Debug("ack not persisted", "partition", a.partition, "err", err)
		}
	}
}

// ackBatch is the most acks one batched write applies.
const ackBatch = 512

// Close closes every connection with a going-away close frame and stops
// the hub's loops.
func (h *Hub) Close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	h.mu.Unlock()
	close(h.stop)
	h.wg.Wait()
	if h.ownReleaser {
		h.cfg.Releaser.Close()
	}
	if h.poll != nil {
		// The poller runs until the close frames are written: a socket
		// the hub owns (fdConn) is woken by it when a full send buffer
		// has room again, and its reader when the client answers.
		defer func() {
			h.poll.stop()
			<-h.pollDone
		}()
	}
	sessions := h.allSessions()
	for _, s := range sessions {
		s.conn.closeWith(ws.StatusGoingAway, "server shutting down")
	}
	// Wait until the close frames are written (each write is bounded by
	// WriteTimeout), so a process exiting after Close does not cut them.
	deadline := time.NewTimer(h.cfg.WriteTimeout + time.Second)
	defer deadline.Stop()
	for _, s := range sessions {
		select {
		case <-s.conn.sentC():
		case <-deadline.C:
			return
		}
	}
}

func (h *Hub) isClosed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}

// CloseActor closes the sockets of an actor (credentials expired or
// revoked, as the host says); an empty actor closes the partition's.
func (h *Hub) CloseActor(partitionID, actorID string) int {
	p := h.part(partitionID, false)
	if p == nil {
		return 0
	}
	n := 0
	for _, s := range h.sessionsOf(p) {
		if actorID == "" || s.auth.ActorID == actorID {
			s.conn.closeWith(ws.StatusPolicyViolation, "credentials revoked")
			n++
		}
	}
	return n
}

// Notify fans out a durable commit. Notifications are delivered in
// sequence order per partition; a sequence missing for longer than
// ReorderWait is a gap, answered with catch-up wakes.
//
// Whether the commit lands inside a session's sync round is decided here,
// synchronously with the notification (a commit pushed in a round is
// notified before the round's response ends): the sessions with a round
// in flight are woken now if the commit matches them, and the fan-out,
// which may reach them after their round ended, sends them no delta of
// it (§8.7 interleaving). Notify never waits for a socket.
func (h *Hub) Notify(cn engine.CommitNotice) {
	// A partition without sockets has no state (forget): a socket that
	// attaches later reads the log's position when it starts, after this
	// commit was durable.
	p := h.lockPart(cn.Partition, false)
	if p == nil {
		return
	}
	n := notified{CommitNotice: cn, rounds: h.roundsLocked(p, cn)}
	p.noticed = time.Now()
	if p.next == 0 {
		p.next = n.Seq // first notification seen
	}
	switch {
	case n.Seq > p.next:
		p.pending[n.Seq] = n
		if p.timer == nil {
			p.timer = time.AfterFunc(h.cfg.ReorderWait, func() { h.skipGap(p) })
		}
		p.mu.Unlock()
		return
	case n.Seq < p.next:
		// An old one (already given up on): sessions skip what they saw.
		p.outbox = append(p.outbox, n)
	default:
		delete(p.pending, n.Seq) // the same commit may be pending (read back from the store)
		p.outbox = append(p.outbox, n)
		p.next++
		for {
			m, ok := p.pending[p.next]
			if !ok {
				break
			}
			delete(p.pending, p.next)
			p.outbox = append(p.outbox, m)
			p.next++
		}
		if len(p.pending) == 0 && p.timer != nil {
			p.timer.Stop()
			p.timer = nil
		}
	}
	h.drainLocked(p)
}

// roundsLocked finds the sessions of the partition with a sync round in
// flight when a commit is notified, and takes the in-round path for them
// at once (§8.7): a matching commit suppresses deltas and queues a wake-up,
// ahead of the round's END; one that does not match is remembered for the
// round end check. p.mu is held; each session's mu is taken briefly (no
// socket is waited for).
func (h *Hub) roundsLocked(p *partition, n engine.CommitNotice) map[*session]bool {
	var rounds map[*session]bool
	var matches map[unique.Handle[string]]bool // by registration signature
	for s := range p.sessions {
		s.mu.Lock()
		if s.roundActive && !s.starting && n.Seq > s.observed {
			if rounds == nil {
				rounds, matches = map[*session]bool{}, map[unique.Handle[string]]bool{}
			}
			m, ok := matches[s.sig]
			if !ok {
				m = s.matchesLocked(n)
				matches[s.sig] = m
			}
			rounds[s] = m
			s.roundCommitLocked(n, m)
		}
		s.mu.Unlock()
	}
	return rounds
}

// skipGap runs when a notification has been missing for ReorderWait. The
// missing commits are read back from the store: a commit with no changes
// gets a sequence but no notification, and the store bridges it. What the
// store cannot bridge is given up on: the pending notifications are
// delivered, and sessions see the gap as non-adjacent sequences.
func (h *Hub) skipGap(p *partition) {
	p.mu.Lock()
	p.timer = nil
	lo, hi := p.next, int64(0)
	for seq := range p.pending {
		hi = max(hi, seq)
	}
	p.mu.Unlock()
	if hi > lo && hi-lo <= remoteBatch && !h.isClosed() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		commits, err := h.cfg.Store.ReadCommits(ctx, p.id, lo-1, hi-1, remoteBatch)
		if err != nil {
			h.cfg.Logger.Warn("realtime: reading missing commits failed", "partition", p.id, "err", err)
		} else if open, gerr := h.cfg.Engine.GateOpen(ctx, p.id); gerr != nil || !open {
			// Read back, they may be another process's of a newer
			// schema (listen.go): given up on, as unreadable ones.
			commits = nil
		}
		cancel()
		for _, c := range commits {
			h.Notify(engine.CommitNotice{Partition: p.id, Seq: c.Seq, CreatedAtMs: c.CreatedAtMs,
				ActorID: c.ActorID, Changes: c.Changes})
		}
	}
	p.mu.Lock()
	if p.timer != nil {
		p.mu.Unlock()
		return // a newer gap is being waited for
	}
	seqs := make([]int64, 0, len(p.pending))
	for s := range p.pending {
		seqs = append(seqs, s)
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	for _, s := range seqs {
		p.outbox = append(p.outbox, p.pending[s])
		delete(p.pending, s)
	}
	if len(seqs) > 0 && seqs[len(seqs)-1] >= p.next {
		p.next = seqs[len(seqs)-1] + 1
		h.stats.gaps.Add(1)
	}
	h.drainLocked(p)
}

// drainLocked starts delivering the partition's outbox on a fresh
// goroutine, unless one is already delivering it (that one delivers these
// too, in order). The notifier never waits for the fan-out: a push is not
// held up by the sockets, and no request ends up delivering everyone
// else's commits under sustained load. p.mu is held on entry and released
// on return.
func (h *Hub) drainLocked(p *partition) {
	if p.delivering || len(p.outbox) == 0 {
		idle := p.idleLocked()
		p.mu.Unlock()
		if idle {
			h.forget(p)
		}
		return
	}
	p.delivering = true
	p.mu.Unlock()
	go h.drain(p)
}

// drain delivers the outbox until it is empty.
func (h *Hub) drain(p *partition) {
	p.mu.Lock()
	for len(p.outbox) > 0 {
		batch := p.outbox
		p.outbox = nil
		sessions := make([]*session, 0, len(p.sessions))
		for s := range p.sessions {
			sessions = append(sessions, s)
		}
		p.mu.Unlock()
		reresolved := false
		for _, n := range batch {
			if h.beforeFanout != nil {
				h.beforeFanout(n.CommitNotice)
			}
			if !reresolved && h.cfg.ReresolveOn != nil && h.cfg.ReresolveOn(n.CommitNotice) {
				// Once for the batch: the resolutions read the store
				// after every commit of the batch is durable, so they
				// hold for the later commits too.
				h.reresolveAll(sessions)
				reresolved = true
			}
			h.fanout(sessions, n)
		}
		p.mu.Lock()
	}
	p.delivering = false
	idle := p.idleLocked()
	p.mu.Unlock()
	if idle {
		h.forget(p)
	}
}

// fanoutShare is the fewest sessions a fan-out goroutine takes: below it
// one goroutine writes them all.
const fanoutShare = 128

// fanoutChunk is how many sessions a fan-out goroutine takes at a time.
const fanoutChunk = 32

// fanout delivers one commit to the sessions. A delta is encoded once per
// distinct registration set and the same frame is queued on every session
// that shares it. Up to GOMAXPROCS goroutines deliver (each write to an
// idle socket is a system call, and with one writer the last socket
// waits for all the others' writes), each taking the next fanoutChunk
// sessions until none is left (inChunks): a goroutine that loses its CPU
// for a while (to another process on the machine) holds back only its
// chunk, not a fixed share of the sockets. fanout returns when all are
// delivered, so every session still sees commits in order.
func (h *Hub) fanout(sessions []*session, n notified) {
	shared := &deltaShared{}
	workers := min(runtime.GOMAXPROCS(0), len(sessions)/fanoutShare)
	inChunks(len(sessions), max(workers, 1), fanoutChunk, func() func(lo, hi int) {
		cache := &deltaCaches{shared: shared}
		return func(lo, hi int) {
			for _, s := range sessions[lo:hi] {
				woke, inRound := n.rounds[s]
				s.deliverMarked(n.CommitNotice, cache, inRound, woke)
			}
		}
	})
}

// inChunks runs over [0, n) in chunks of size on workers goroutines (the
// caller's one of them), each taking the next chunk until none is left
// (a single worker runs [0, n) in one go); worker makes each goroutine's
// function. It returns when all ran.
func inChunks(n, workers, size int, worker func() func(lo, hi int)) {
	if workers <= 1 {
		if n > 0 {
			worker()(0, n)
		}
		return
	}
	var next atomic.Int64
	take := func() {
		run := worker()
		for {
			hi := int(next.Add(int64(size)))
			lo := hi - size
			if lo >= n {
				return
			}
			run(lo, min(hi, n))
		}
	}
	var wg sync.WaitGroup
	for range workers - 1 {
		wg.Go(take)
	}
	take()
	wg.Wait()
}
