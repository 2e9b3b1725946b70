package syncgo

import "testing"

// TestWatchDispatchSkipsSeenCommits: a commit notified late (the commit
// listener of a shared store brings it after the watch's last run read
// the log past it) does not rerun the watch; a newer commit of a table
// the query reads does, as a rerun of every watch (seq 0) does. Each run
// is held in flight (running), so a trigger shows as dirty instead of
// starting a run.
func TestWatchDispatchSkipsSeenCommits(t *testing.T) {
	w := &watchState{id: "tasks", cq: &compiledQuery{tables: []string{"tasks"}}, seen: 5, running: true}
	s := &watchSession{watches: map[string]*watchState{w.id: w}}
	h := &watchHub{parts: map[string]*watchPartition{"p": {sessions: map[*watchSession]struct{}{s: {}}}}}
	for _, c := range []struct {
		partition string
		tables    []string
		seq       int64
		rerun     bool
	}{
		{"p", []string{"tasks"}, 5, false},  // read by the last run already
		{"p", []string{"tasks"}, 3, false},  // older still
		{"p", []string{"labels"}, 6, false}, // a table the query does not read
		{"q", []string{"tasks"}, 6, false},  // another partition
		{"p", []string{"labels", "tasks"}, 6, true},
		{"p", nil, 5, false}, // every table, but read already
		{"p", nil, 0, true},  // every watch, whatever it read
	} {
		w.dirty = false
		h.dispatch(c.partition, c.tables, c.seq)
		if w.dirty != c.rerun {
			t.Errorf("dispatch(%q, %v, %d): rerun %v, want %v", c.partition, c.tables, c.seq, w.dirty, c.rerun)
		}
	}
}
