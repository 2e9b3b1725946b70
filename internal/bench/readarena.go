package bench

// readRoom is the least room a read is given, and readMax the most it
// reads (more is reported ready again in the poller's next round: its
// epoll set is level-triggered).
const (
	readRoom = 16 << 10
	readMax  = 64 << 10
)

// readArena is where a socket poller's reads go until they are handled:
// each read gets the room after the one before, so that a round of reads
// of many sockets costs no allocation. When the room runs out, the arena
// is replaced by one twice as large if the poller may hold more reads
// (the reads held keep the arena they point into), up to max; it keeps
// its size for later rounds.
type readArena struct {
	buf []byte
	off int
	max int
}

func newReadArena(size, limit int) *readArena {
	return &readArena{buf: make([]byte, max(size, readRoom)), max: limit}
}

// room returns the bytes the next read may fill; ok is false when the
// arena is full and may not grow (grow false, or at its largest).
func (a *readArena) room(grow bool) (b []byte, ok bool) {
	if len(a.buf)-a.off < readRoom {
		if !grow || 2*len(a.buf) > a.max {
			return nil, false
		}
		a.buf, a.off = make([]byte, 2*len(a.buf)), 0
	}
	return a.buf[a.off:min(a.off+readMax, len(a.buf))], true
}

// used takes the m bytes that the last read filled.
func (a *readArena) used(m int) { a.off += m }

// reset makes the whole arena room again: no read in it is held.
func (a *readArena) reset() { a.off = 0 }
