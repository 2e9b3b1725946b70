package realtime

import (
	"net"
	"strings"
	"testing"

	"github.com/gobwas/ws"

	"github.com/syncgo/syncgo/internal/engine"
	"github.com/syncgo/syncgo/wire"
)

// A delta that cannot be encoded (here a change whose row id is not
// UTF-8) is never sent with its COMMIT left out, which would advance the
// client past the commit: the session gets a catch-up wake instead, and
// its pull decides.
func TestUnencodableDeltaWakes(t *testing.T) {
	h := testHub(t)
	s, client := currentSession(t, h)
	n := rowNotice(t, h, 1, "r\xff", "p1")
	s.deliver(n, &deltaCaches{})
	f := readFrame(t, client)
	if f.Header.OpCode != ws.OpText || !strings.Contains(string(f.Payload), `"catchup-required"`) {
		t.Fatalf("got %v %q, want a catch-up wake", f.Header.OpCode, f.Payload)
	}
	if st := h.Stats(); st.DropsUnencodable != 1 || st.Deltas != 0 {
		t.Fatalf("stats %+v: want one unencodable drop and no delta", st)
	}
	s.mu.Lock()
	suppressed := s.suppressed
	s.mu.Unlock()
	if !suppressed {
		t.Fatal("the session is not suppressed after the unencodable delta")
	}
}

// A commit whose stored actor id is not UTF-8 (a database written before
// authentication refused such ids) is delivered as a delta, the actor id
// rendered with U+FFFD.
func TestDeltaRendersUnencodableActor(t *testing.T) {
	h := testHub(t)
	s, client := currentSession(t, h)
	n := rowNotice(t, h, 1, "r", "p1")
	n.ActorID = "ev\xffil"
	s.deliver(n, &deltaCaches{})
	f := readFrame(t, client)
	if f.Header.OpCode != ws.OpBinary || len(f.Payload) == 0 || f.Payload[0] != wire.ChannelTagDelta {
		t.Fatalf("got %v %q, want a delta", f.Header.OpCode, f.Payload)
	}
	m, err := wire.DecodeMessage(f.Payload[1:], wire.DecoderOptions{Kind: wire.KindResponse})
	if err != nil {
		t.Fatal(err)
	}
	var commit *wire.Commit
	for _, fr := range m.Frames {
		if c, ok := fr.(*wire.Commit); ok {
			commit = c
		}
	}
	if commit == nil || commit.ActorID != "ev\uFFFDil" || len(commit.Changes) != 1 {
		t.Fatalf("delta frames %v; want a COMMIT by %q with its change", m.Frames, "ev\uFFFDil")
	}
}

// rowNotice is notice with the upserted row's payload.
func rowNotice(t *testing.T, h *Hub, seq int64, rowID, project string) engine.CommitNotice {
	t.Helper()
	tbl, _ := h.cfg.Engine.Schema().Table("tasks")
	payload, err := tbl.RowCodec().AppendRow(nil, []wire.Value{{Str: "r"}, {Str: project}})
	if err != nil {
		t.Fatal(err)
	}
	n := notice(seq, project)
	n.Changes[0].RowID, n.Changes[0].Payload = rowID, payload
	return n
}

// currentSession is testSession registered on p1 with the served schema
// version, caught up: the next commit is adjacent.
func currentSession(t *testing.T, h *Hub) (*session, net.Conn) {
	t.Helper()
	s, client := testSession(t, h, "p1")
	rs := h.newRegSet([]registration{{id: "s", table: "tasks", schemaVersion: h.cfg.Engine.Schema().Version(),
		effective: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}}}, wire.Version3, "e")
	s.part.mu.Lock()
	s.mu.Lock()
	s.installLocked(rs)
	s.observed = 0
	s.mu.Unlock()
	s.part.mu.Unlock()
	return s, client
}

// A delta whose rows cannot be narrowed to a registration's older layout
// (here a schema version the engine does not serve) is a catch-up wake,
// never a delta with that section left out.
func TestUnnarrowableDeltaWakes(t *testing.T) {
	h := testHub(t)
	s, client := testSession(t, h, "p1") // registered with schema version 0
	s.observed = 0
	s.deliver(rowNotice(t, h, 1, "r", "p1"), &deltaCaches{})
	f := readFrame(t, client)
	if f.Header.OpCode != ws.OpText || !strings.Contains(string(f.Payload), `"catchup-required"`) {
		t.Fatalf("got %v %q, want a catch-up wake", f.Header.OpCode, f.Payload)
	}
	if st := h.Stats(); st.DropsUnencodable != 1 || st.Deltas != 0 {
		t.Fatalf("stats %+v: want one unencodable drop and no delta", st)
	}
}
