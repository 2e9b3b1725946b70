package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/wire"
)

// report is the soak's result.
type report struct {
	Duration   string         `json:"duration"`
	Servers    []string       `json:"servers"`
	Clients    int            `json:"clients"`
	Sockets    int            `json:"sockets"`
	Queued     int            `json:"commitsQueued"`
	Applied    int            `json:"commitsAcknowledged"`
	Cached     int            `json:"cachedAnswers"`
	Rejected   map[string]int `json:"rejectedByCode"`
	Dropped    int            `json:"droppedLocally"`
	Forbidden  int            `json:"forbiddenWritesRefused"`
	Reinstalls int64          `json:"reinstalls"`
	Rounds     int64          `json:"rounds"`
	Deltas     int64          `json:"deltasApplied"`
	Wakeups    int64          `json:"wakeups"`
	Dials      int64          `json:"socketDials"`
	ClientErrs int64          `json:"clientErrors"`
	Statuses   map[int]int    `json:"httpErrorStatuses"`
	ErrKinds   map[string]int `json:"clientErrorsByKind"`
	// Unexplained are the 5xx answers outside every fault's window.
	Unexplained []string `json:"unexplained5xx"`
	// UnexplainedTransport are the client errors without an HTTP status
	// (a response cut short, a reset or refused connection) outside the
	// windows of the faults that cut connections: a process killed or
	// restarted, sockets dropped.
	UnexplainedTransport []string `json:"unexplainedTransportErrors"`
	// CutResponses are the times of the responses cut short (the client
	// read part of a body or none of it: EOF, a reset, a truncated
	// message), to set beside the faults' times.
	CutResponses []string       `json:"cutResponses"`
	Faults       []fault        `json:"faults"`
	FaultCounts  map[string]int `json:"faultCounts"`
	Samples      []sample       `json:"samples"`
	Rows         map[string]int `json:"serverRowsByTenant"`
	LogProblems  []string       `json:"logProblems"`
	Violations   []string       `json:"violations"`
}

// faultWindow is how long after a fault a 5xx answer is put down to it.
const faultWindow = 20 * time.Second

// cutResponse reports whether a client error of kind (noteErr's form) is
// a response cut short rather than a connection refused or a timeout.
func cutResponse(kind string) bool {
	for _, k := range []string{"EOF", "connection reset", "truncated message"} {
		if strings.Contains(kind, k) {
			return true
		}
	}
	return false
}

// cutByFault reports whether a client error of kind at at falls in the
// window of a fault that cuts connections: a server process killed,
// restarted or stopped for a deploy, or sockets dropped. A Postgres fault
// answers 5xx; it cuts no response.
//
//   - A response cut short (cutResponse) is cut at a SIGKILL's or a
//     socket drop's instant, so its window there is a few seconds.
//   - A deploy's graceful stop closes the keep-alive connections left
//     idle by its drain, and a request sent on one as it closes fails
//     with a reset or an EOF before any answer (HTTP/1.1 has no race-free
//     close of an idle connection; clients retry such requests). It must
//     never cut an answer's body: a truncated message is not put down to
//     a deploy.
//   - A refused connection or a timeout can follow a kill, a restart or a
//     deploy for as long as the process takes to start and the client to
//     back off.
func cutByFault(faults []fault, kind string, at time.Duration) bool {
	cut := cutResponse(kind)
	body := strings.Contains(kind, "truncated message")
	for _, f := range faults {
		window := faultWindow
		switch {
		case cut && (f.Kind == "sigkill" || f.Kind == "socket_drop"):
			window = cutWindow
		case f.Kind == "deploy":
			if body {
				continue
			}
		case cut, f.Kind != "sigkill" && f.Kind != "restarted" && f.Kind != "socket_drop":
			continue
		}
		if at >= f.At-time.Second && at <= f.At+window {
			return true
		}
	}
	return false
}

// cutWindow is how long after a SIGKILL or a socket drop a response cut
// short is put down to it.
const cutWindow = 3 * time.Second

// acked is an acknowledged commit.
type acked struct {
	seq    int64
	tenant string
	out    sspclient.Outcome
	mark   string
}

// check compares the record of the run with the servers' state.
func (r *run) check(ctx context.Context) *report {
	rep := &report{Duration: r.cfg.duration.String(), Servers: r.serverURLs(), Clients: len(r.clients),
		Rejected: map[string]int{}, Statuses: map[int]int{}, FaultCounts: map[string]int{}, Rows: map[string]int{}}
	byTenant := map[string][]acked{}
	for _, v := range r.clients {
		if v.socket {
			rep.Sockets++
		}
		rep.Rounds += v.rounds.Load()
		rep.Deltas += v.deltas.Load()
		rep.Wakeups += v.wakeups.Load()
		rep.Dials += v.dials.Load()
		rep.ClientErrs += v.errs.Load()
		v.mu.Lock()
		replicas := append(slices.Clone(v.past), v.c)
		marks, forbid := v.marks, v.forbid
		v.mu.Unlock()
		rep.Queued += len(marks)
		seen := map[string]bool{}
		for _, c := range replicas {
			for _, o := range c.Outcomes() {
				if seen[o.CommitID] {
					r.violation("client %s: two outcomes of commit %s", v.actor, o.CommitID)
				}
				seen[o.CommitID] = true
				switch {
				case o.Dropped != "":
					rep.Dropped++
				case o.Status == wire.PushApplied || o.Status == wire.PushCached:
					if o.Status == wire.PushCached {
						rep.Cached++
					}
					if forbid[o.CommitID] {
						r.violation("client %s: commit %s writing to the forbidden project %s was acknowledged (seq %d)", v.actor, o.CommitID, v.forbidden, o.CommitSeq)
					}
					rep.Applied++
					byTenant[v.tenant] = append(byTenant[v.tenant], acked{seq: o.CommitSeq, tenant: v.tenant, out: o, mark: marks[o.CommitID]})
				default:
					code := o.ErrorCode()
					if _, ok := o.Conflict(); ok {
						code = "conflict"
					}
					rep.Rejected[code]++
					if forbid[o.CommitID] {
						rep.Forbidden++
					}
				}
			}
		}
		for cid := range marks {
			if !seen[cid] {
				r.violation("client %s: commit %s has no outcome after the catch-up", v.actor, cid)
			}
		}
	}

	// The expected state of each tenant: the acknowledged commits applied
	// in commit order.
	for t := range r.cfg.tenants {
		tenant := fmt.Sprintf("t%d", t)
		list := byTenant[tenant]
		slices.SortFunc(list, func(a, b acked) int { return cmp.Compare(a.seq, b.seq) })
		items := map[string]wire.SparseRow{}
		marks := map[string]bool{}
		for i, a := range list {
			if i > 0 && list[i-1].seq == a.seq {
				r.violation("tenant %s: commits %s and %s were both acknowledged with seq %d", tenant, list[i-1].out.CommitID, a.out.CommitID, a.seq)
			}
			for _, op := range a.out.Commit.Operations {
				switch {
				case op.Table == "marks":
					marks[op.RowID] = true
				case op.Op == wire.OpDelete:
					delete(items, op.RowID)
				default:
					items[op.RowID] = op.Values
				}
			}
		}
		r.compareTenant(ctx, rep, tenant, items, marks)
	}
	r.compareClients()

	r.mu.Lock()
	rep.Faults = r.faults
	for _, f := range r.faults {
		rep.FaultCounts[f.Kind]++
	}
	for _, s := range r.statuses {
		rep.Statuses[s.Status]++
		if s.Status < 500 {
			continue
		}
		explained := false
		for _, f := range r.faults {
			if f.Kind != "socket_drop" && s.At >= f.At-time.Second && s.At <= f.At+faultWindow {
				explained = true
				break
			}
		}
		if !explained {
			rep.Unexplained = append(rep.Unexplained, fmt.Sprintf("%s: %d %s", s.At.Round(time.Millisecond), s.Status, s.Msg))
		}
	}
	for _, e := range r.errEvents {
		if cutResponse(e.Kind) && len(rep.CutResponses) < 200 {
			rep.CutResponses = append(rep.CutResponses, fmt.Sprintf("%s: %s", e.At.Round(time.Millisecond), e.Kind))
		}
		if !cutByFault(r.faults, e.Kind, e.At) {
			rep.UnexplainedTransport = append(rep.UnexplainedTransport, fmt.Sprintf("%s: %s", e.At.Round(time.Millisecond), e.Kind))
		}
	}
	rep.Samples = r.samples
	rep.ErrKinds = r.errKinds
	r.mu.Unlock()
	for _, in := range r.insts {
		p, err := in.logProblems()
		if err != nil {
			r.violation("read %s: %v", in.logPath, err)
		}
		for _, l := range p {
			rep.LogProblems = append(rep.LogProblems, in.name+": "+l)
		}
	}
	if len(rep.LogProblems) > 0 {
		r.violation("the server logs show %d panic or fatal lines", len(rep.LogProblems))
	}
	if len(rep.Unexplained) > 0 {
		r.violation("%d 5xx answers outside every fault's window", len(rep.Unexplained))
	}
	if len(rep.UnexplainedTransport) > 0 {
		r.violation("%d client errors without an HTTP status outside the windows of killed processes and dropped sockets", len(rep.UnexplainedTransport))
	}
	rep.Reinstalls = r.reinstalls.Load()
	r.mu.Lock()
	rep.Violations = r.violations
	r.mu.Unlock()
	return rep
}

// auditor bootstraps every project of a tenant with a token granting all
// of them: the server's state.
func (r *run) auditor(ctx context.Context, tenant string) (*sspclient.Client, error) {
	c, err := sspclient.New(r.url(0), token(r.secret, "auditor", tenant, nil, true), r.schema,
		sspclient.Options{HTTPClient: r.http})
	if err != nil {
		return nil, err
	}
	var t int
	fmt.Sscanf(tenant, "t%d", &t)
	for p := range r.cfg.projects {
		for _, tbl := range []string{"items", "marks"} {
			if err := c.Subscribe(tbl+":"+project(t, p), tbl, map[string][]string{"project_id": {project(t, p)}}); err != nil {
				return nil, err
			}
		}
	}
	for try := 0; ; try++ {
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		_, err = c.SyncUntilQuiet(rctx, 1000)
		cancel()
		if err == nil || try == 5 {
			return c, err
		}
		time.Sleep(time.Second)
	}
}

func (r *run) compareTenant(ctx context.Context, rep *report, tenant string, items map[string]wire.SparseRow, marks map[string]bool) {
	a, err := r.auditor(ctx, tenant)
	if err != nil {
		r.violation("tenant %s: auditor bootstrap: %v", tenant, err)
		return
	}
	gotItems, gotMarks := a.Rows("items"), a.Rows("marks")
	rep.Rows[tenant] = len(gotItems) + len(gotMarks)
	t, _ := r.schema.Table("items")
	const most = 20
	n := 0
	bad := func(format string, args ...any) {
		if n < most {
			r.violation("tenant %s: "+format, append([]any{tenant}, args...)...)
		} else if n == most {
			r.violation("tenant %s: more differences left out", tenant)
		}
		n++
	}
	for _, id := range sortedKeys(items) {
		want := items[id]
		got, ok := gotItems[id]
		if !ok {
			bad("item %s of an acknowledged commit is missing on the server", id)
			continue
		}
		for i, c := range t.Columns() {
			if i < len(want.Values) && want.Present[i] && !sameValue(want.Values[i], got.Values[i]) {
				bad("item %s column %s: server %v, last acknowledged write %v", id, c.Name, sspclient.GoValue(c.Type, got.Values[i]), sspclient.GoValue(c.Type, want.Values[i]))
			}
		}
	}
	for _, id := range sortedKeys(gotItems) {
		if _, ok := items[id]; !ok {
			bad("item %s is on the server but no acknowledged commit leaves it there", id)
		}
	}
	for _, id := range sortedKeys(marks) {
		got, ok := gotMarks[id]
		if !ok {
			bad("mark %s of an acknowledged commit is missing: the commit was lost", id)
		} else if got.Version != 1 {
			bad("mark %s has version %d: its commit was applied %d times", id, got.Version, got.Version)
		}
	}
	for _, id := range sortedKeys(gotMarks) {
		if !marks[id] {
			bad("mark %s is on the server but its commit was not acknowledged (rejected, or never answered)", id)
		}
	}
	r.mu.Lock()
	r.auditors[tenant] = a
	r.mu.Unlock()
}

func sameValue(a, b wire.Value) bool {
	return a.Null == b.Null && a.Bool == b.Bool && a.Int == b.Int && a.Float == b.Float && a.Str == b.Str && string(a.Bytes) == string(b.Bytes)
}

// compareClients checks each client's replica against its tenant's
// auditor: no row outside its granted projects, the spy subscription
// revoked, and the rows of each granted project equal to the server's.
func (r *run) compareClients() {
	r.mu.Lock()
	byTenant := r.auditors
	r.mu.Unlock()
	for _, v := range r.clients {
		c := v.client()
		a := byTenant[v.tenant]
		if v.spy != "" {
			if st, ok := c.Subscription("spy"); !ok || st.Status != wire.SubRevoked {
				r.violation("client %s: the subscription to the ungranted project %s is not revoked (status %v)", v.actor, v.spy, st.Status)
			}
		}
		diffs := 0
		for _, tbl := range []string{"items", "marks"} {
			mine := c.Rows(tbl)
			for id, row := range mine {
				if !slices.Contains(v.projects, row.Values[1].Str) {
					r.violation("client %s holds %s row %s of project %s outside its scopes %v", v.actor, tbl, id, row.Values[1].Str, v.projects)
				}
			}
			if a == nil {
				continue // the tenant's bootstrap failed: reported by compareTenant
			}
			d := diffRows(mine, a.Rows(tbl), v.projects)
			for _, id := range d.missing {
				if diffs++; diffs <= 5 {
					r.violation("client %s (replica %s) lacks %s row %s (server version %d)", v.actor, c.ClientID(), tbl, id, d.server[id].Version)
				}
			}
			for _, id := range slices.Concat(d.older, d.newer, d.changed) {
				if diffs++; diffs <= 5 {
					r.violation("client %s (replica %s) %s row %s: version %d, server %d (values equal: %v)", v.actor, c.ClientID(), tbl, id,
						mine[id].Version, d.server[id].Version, slices.EqualFunc(mine[id].Values, d.server[id].Values, sameValue))
				}
			}
			for _, id := range d.extra {
				if diffs++; diffs <= 5 {
					r.violation("client %s (replica %s) holds %s row %s the server does not have", v.actor, c.ClientID(), tbl, id)
				}
			}
		}
	}
}

// rowDiff is how a client's rows of a table differ from the server's
// rows of the client's projects, each list of row ids sorted.
type rowDiff struct {
	server  map[string]sspclient.Row
	missing []string // on the server, not on the client
	older   []string // at a lower version on the client
	newer   []string // at a higher version on the client
	changed []string // at the same version with other values
	extra   []string // on the client, not on the server
}

// diffRows compares a client's rows with the server's (a fresh bootstrap
// of the whole tenant), within the client's projects.
func diffRows(mine, server map[string]sspclient.Row, projects []string) rowDiff {
	d := rowDiff{server: server}
	for id, srow := range server {
		if !slices.Contains(projects, srow.Values[1].Str) {
			continue
		}
		crow, ok := mine[id]
		switch {
		case !ok:
			d.missing = append(d.missing, id)
		case crow.Version < srow.Version:
			d.older = append(d.older, id)
		case crow.Version > srow.Version:
			d.newer = append(d.newer, id)
		case !slices.EqualFunc(crow.Values, srow.Values, sameValue):
			d.changed = append(d.changed, id)
		}
	}
	for id := range mine {
		if _, ok := server[id]; !ok {
			d.extra = append(d.extra, id)
		}
	}
	for _, l := range []*[]string{&d.missing, &d.older, &d.newer, &d.changed, &d.extra} {
		slices.Sort(*l)
	}
	return d
}

func (rep *report) write(w io.Writer) {
	fmt.Fprintf(w, "soak: %s, %d clients (%d with sockets), servers %s\n", rep.Duration, rep.Clients, rep.Sockets, strings.Join(rep.Servers, " "))
	fmt.Fprintf(w, "commits: %d queued, %d acknowledged (%d answered from the idempotency journal), %d dropped locally, rejected %v (%d forbidden writes refused)\n",
		rep.Queued, rep.Applied, rep.Cached, rep.Dropped, rep.Rejected, rep.Forbidden)
	fmt.Fprintf(w, "rounds %d, deltas applied %d, wake-ups/refused deltas %d, socket dials %d, reinstalls %d, client errors %d\n",
		rep.Rounds, rep.Deltas, rep.Wakeups, rep.Dials, rep.Reinstalls, rep.ClientErrs)
	for _, k := range sortedKeys(rep.ErrKinds) {
		fmt.Fprintf(w, "  client error %6d × %s\n", rep.ErrKinds[k], k)
	}
	fmt.Fprintf(w, "HTTP error statuses: %v; 5xx outside fault windows: %d\n", rep.Statuses, len(rep.Unexplained))
	for _, u := range rep.Unexplained[:min(len(rep.Unexplained), 10)] {
		fmt.Fprintln(w, "  ", u)
	}
	fmt.Fprintf(w, "responses cut short: %d\n", len(rep.CutResponses))
	for _, c := range rep.CutResponses[:min(len(rep.CutResponses), 10)] {
		fmt.Fprintln(w, "  ", c)
	}
	fmt.Fprintf(w, "client errors without an HTTP status outside the windows of killed processes and dropped sockets: %d\n", len(rep.UnexplainedTransport))
	for _, u := range rep.UnexplainedTransport[:min(len(rep.UnexplainedTransport), 10)] {
		fmt.Fprintln(w, "  ", u)
	}
	fmt.Fprintf(w, "faults: %v\n", rep.FaultCounts)
	fmt.Fprintf(w, "server rows by tenant: %v\n", rep.Rows)
	writeTrend(w, rep.Samples)
	for _, l := range rep.LogProblems[:min(len(rep.LogProblems), 20)] {
		fmt.Fprintln(w, "log:", l)
	}
	if len(rep.Violations) == 0 {
		fmt.Fprintln(w, "invariants: all held")
		return
	}
	fmt.Fprintf(w, "invariants: %d violations\n", len(rep.Violations))
	for _, v := range rep.Violations[:min(len(rep.Violations), 100)] {
		fmt.Fprintln(w, "  VIOLATION:", v)
	}
}

// writeTrend prints, per process incarnation, its first, middle and last
// samples.
func writeTrend(w io.Writer, samples []sample) {
	type key struct {
		name  string
		start int
	}
	by := map[key][]sample{}
	var keys []key
	for _, s := range samples {
		k := key{s.Instance, s.Start}
		if _, ok := by[k]; !ok {
			keys = append(keys, k)
		}
		by[k] = append(by[k], s)
	}
	for _, k := range keys {
		l := by[k]
		f, m, e := l[0], l[len(l)/2], l[len(l)-1]
		fmt.Fprintf(w, "process %s start %d (%d samples): RSS %d/%d/%d MiB, goroutines %d/%d/%d at %s/%s/%s of its life\n",
			k.name, k.start, len(l), f.RSSKiB/1024, m.RSSKiB/1024, e.RSSKiB/1024, f.Goroutines, m.Goroutines, e.Goroutines,
			f.Uptime.Round(time.Second), m.Uptime.Round(time.Second), e.Uptime.Round(time.Second))
	}
}

func (rep *report) writeJSON(path string) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
