package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/wire"
)

// token signs the HS256 token of an actor of a tenant (the partition)
// granted projects, or every project of the tenant with role auditor.
func token(secret, sub, tenant string, projects []string, auditor bool) string {
	claims := jwt.MapClaims{"sub": sub, "tenant": tenant, "projects": projects,
		"iat": time.Now().Unix(), "exp": time.Now().Add(24 * time.Hour).Unix()}
	if auditor {
		claims["role"] = "auditor"
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(secret))
	if err != nil {
		panic(err) // HS256 with a byte key does not fail
	}
	return s
}

// vclient is one simulated user: an actor of a tenant, granted some of the
// tenant's projects, holding a replica (an sspclient.Client) that it may
// throw away and bootstrap again (a reinstall). Every replica it held is
// kept: their outcomes are the record of acknowledged commits.
type vclient struct {
	r         *run
	idx       int
	actor     string
	tenant    string
	projects  []string // granted
	forbidden string   // a project of the tenant not granted: writes to it must be refused
	spy       string   // a project not granted it subscribes to: the subscription must be revoked
	socket    bool     // holds a realtime socket
	inst      int      // the server instance it talks to

	mu       sync.Mutex
	c        *sspclient.Client
	past     []*sspclient.Client
	rt       *sspclient.Realtime
	n        int               // commits queued
	forbid   map[string]bool   // commit ids written to the forbidden project
	replicas int               // reinstalls
	marks    map[string]string // commit id → mark id
	rounds   atomic.Int64
	deltas   atomic.Int64
	wakeups  atomic.Int64
	errs     atomic.Int64
	dials    atomic.Int64
}

func (v *vclient) newReplica() (*sspclient.Client, error) {
	in := v.r.url(v.inst)
	c, err := sspclient.New(in, token(v.r.secret, v.actor, v.tenant, v.projects, false), v.r.schema,
		sspclient.Options{HTTPClient: v.r.http, ClientID: fmt.Sprintf("%s-r%d", v.actor, v.replicas),
			RealtimeNetDial: (&net.Dialer{Timeout: 5 * time.Second}).DialContext})
	if err != nil {
		return nil, err
	}
	for _, p := range v.projects {
		for _, t := range []string{"items", "marks"} {
			if err := c.Subscribe(t+":"+p, t, map[string][]string{"project_id": {p}}); err != nil {
				return nil, err
			}
		}
	}
	if v.spy != "" {
		if err := c.Subscribe("spy", "items", map[string][]string{"project_id": {v.spy}}); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (v *vclient) client() *sspclient.Client {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.c
}

// note records a request's failure.
func (v *vclient) note(err error) {
	if err == nil {
		return
	}
	v.errs.Add(1)
	v.r.noteErr(err)
	var he *sspclient.HTTPError
	if errors.As(err, &he) {
		v.r.noteStatus(he.StatusCode, he.Error())
	}
}

// loop runs the client's actions until ctx ends.
func (v *vclient) loop(ctx context.Context, think time.Duration) {
	rng := rand.New(rand.NewPCG(uint64(v.idx), uint64(v.r.seed)))
	for ctx.Err() == nil {
		sleep(ctx, time.Duration(rng.Int64N(int64(2*think))))
		if ctx.Err() != nil {
			return
		}
		v.act(ctx, rng)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// act does one random action and sends it.
func (v *vclient) act(ctx context.Context, rng *rand.Rand) {
	c := v.client()
	if _, ok := c.LogEpoch(); !ok {
		v.round(ctx, c)
		return
	}
	p := rng.IntN(100)
	switch {
	case p < 35:
		v.write(c, rng, v.projects[rng.IntN(len(v.projects))], "", false)
	case p < 55:
		if id, proj, ok := v.pickRow(c, rng); ok {
			v.write(c, rng, proj, id, true)
		}
	case p < 60:
		if id, proj, ok := v.pickRow(c, rng); ok {
			v.write(c, rng, proj, id, false)
		}
	case p < 68:
		if id, proj, ok := v.pickRow(c, rng); ok {
			v.remove(c, proj, id)
		}
	case p < 71:
		v.write(c, rng, v.forbidden, "", false)
	case p < 72 && v.r.cfg.reinstall:
		v.reinstall(ctx)
		return
	}
	if rng.IntN(2) == 0 && c.Pending() > 0 {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := c.Push(ctx)
		cancel()
		v.note(err)
		return
	}
	v.round(ctx, c)
}

func (v *vclient) round(ctx context.Context, c *sspclient.Client) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := c.Sync(ctx)
	v.rounds.Add(1)
	v.note(err)
}

// catchUp pulls until a round needs no follow-up (a bootstrap in pages,
// a catch-up limited by limitCommits), as a client does on a wake-up.
func (v *vclient) catchUp(ctx context.Context, c *sspclient.Client) {
	for range 50 {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		res, err := c.Sync(rctx)
		cancel()
		v.rounds.Add(1)
		v.note(err)
		if err != nil || !res.More() {
			return
		}
	}
}

// pickRow returns a random synced item of a granted project.
func (v *vclient) pickRow(c *sspclient.Client, rng *rand.Rand) (id, project string, ok bool) {
	rows := c.Rows("items")
	if len(rows) == 0 {
		return "", "", false
	}
	k := rng.IntN(len(rows))
	for rid, r := range rows {
		if k == 0 {
			return rid, r.Values[1].Str, true
		}
		k--
	}
	return "", "", false
}

// write queues a commit upserting an item (a new one when id is empty;
// versioned: with the local row's version as base, which may conflict)
// and the commit's mark.
func (v *vclient) write(c *sspclient.Client, rng *rand.Rand, project, id string, versioned bool) {
	v.mu.Lock()
	v.n++
	n := v.n
	v.mu.Unlock()
	mark := v.actor + "-" + strconv.Itoa(n)
	if id == "" {
		id = "i-" + mark
	}
	body := make([]byte, 16+rng.IntN(200))
	for i := range body {
		body[i] = 'a' + byte(rng.IntN(26))
	}
	cid, err := c.Mutate(func(tx *sspclient.Tx) error {
		var opts []sspclient.OpOption
		if versioned {
			opts = append(opts, sspclient.Versioned())
		}
		if err := tx.Upsert("items", map[string]any{"id": id, "project_id": project, "owner": v.actor,
			"n": int64(n), "body": string(body)}, opts...); err != nil {
			return err
		}
		return tx.Upsert("marks", map[string]any{"id": mark, "project_id": project, "client": v.actor})
	})
	if err != nil {
		v.r.violation("client %s: queue a write: %v", v.actor, err)
		return
	}
	v.mu.Lock()
	v.marks[cid] = mark
	if project == v.forbidden {
		v.forbid[cid] = true
	}
	v.mu.Unlock()
}

// remove queues a versioned delete of an item, with its commit's mark.
func (v *vclient) remove(c *sspclient.Client, project, id string) {
	v.mu.Lock()
	v.n++
	mark := v.actor + "-" + strconv.Itoa(v.n)
	v.mu.Unlock()
	cid, err := c.Mutate(func(tx *sspclient.Tx) error {
		if err := tx.Delete("items", id, sspclient.Versioned()); err != nil {
			return err
		}
		return tx.Upsert("marks", map[string]any{"id": mark, "project_id": project, "client": v.actor})
	})
	if err != nil {
		v.r.violation("client %s: queue a delete: %v", v.actor, err)
		return
	}
	v.mu.Lock()
	v.marks[cid] = mark
	v.mu.Unlock()
}

// reinstall drains the replica's outbox and replaces it with a fresh one,
// which bootstraps. A replica whose outbox does not drain is kept.
func (v *vclient) reinstall(ctx context.Context) {
	c := v.client()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := c.SyncUntilQuiet(ctx, 20); err != nil || c.Pending() > 0 {
		v.note(err)
		return
	}
	v.mu.Lock()
	v.replicas++
	v.mu.Unlock()
	nc, err := v.newReplica()
	if err != nil {
		v.r.violation("client %s: new replica: %v", v.actor, err)
		return
	}
	v.mu.Lock()
	v.past = append(v.past, v.c)
	v.c = nc
	rt := v.rt
	v.mu.Unlock()
	if rt != nil {
		_ = rt.Drop() // the socket loop dials again for the new replica
	}
	v.r.reinstalls.Add(1)
}

// socketLoop holds a realtime socket: it applies deltas and acks them,
// pulls on a wake-up or a refused delta, and dials again after a drop.
func (v *vclient) socketLoop(ctx context.Context) {
	for ctx.Err() == nil {
		c := v.client()
		if _, ok := c.LogEpoch(); !ok || !v.registered(c) {
			// Under the HTTP binding a socket's registrations are the
			// client record's at connect (spec §8.1): one dialed before
			// the replica's first pull registered its subscriptions
			// gets no delta for its whole life.
			v.round(ctx, c)
			sleep(ctx, 200*time.Millisecond)
			continue
		}
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		rt, err := c.DialRealtime(dctx, nil)
		cancel()
		v.dials.Add(1)
		if err != nil {
			v.note(err)
			sleep(ctx, time.Duration(300+rand.IntN(1500))*time.Millisecond)
			continue
		}
		v.mu.Lock()
		current := v.c == c
		if current {
			v.rt = rt
		}
		v.mu.Unlock()
		if !current {
			// A reinstall replaced the replica during the dial: this
			// socket would feed the old one.
			_ = rt.Drop()
			continue
		}
		stop := context.AfterFunc(ctx, func() { _ = rt.Drop() })
		v.catchUp(ctx, c) // what happened while away
		if f, ok := c.AckFloor(); ok {
			_ = rt.Ack(f)
		}
		for {
			m, err := rt.Next()
			if err != nil {
				break
			}
			switch {
			case m.Delta != nil:
				if _, err := c.ApplyDelta(m.Delta); err != nil {
					v.wakeups.Add(1)
					v.catchUp(ctx, c)
				} else {
					v.deltas.Add(1)
				}
				if f, ok := c.AckFloor(); ok {
					_ = rt.Ack(f)
				}
			case m.Event != nil:
				if _, ok := m.Event.(wire.Wake); ok {
					v.wakeups.Add(1)
					v.catchUp(ctx, c)
				}
			}
		}
		stop()
		_ = rt.Drop()
		v.mu.Lock()
		if v.rt == rt {
			v.rt = nil
		}
		v.mu.Unlock()
		sleep(ctx, time.Duration(100+rand.IntN(900))*time.Millisecond)
	}
}

// registered reports whether every subscription of the granted projects
// has completed a pull (a cursor, no bootstrap under way), so that the
// server holds them in the replica's client record.
func (v *vclient) registered(c *sspclient.Client) bool {
	for _, p := range v.projects {
		for _, t := range []string{"items", "marks"} {
			st, ok := c.Subscription(t + ":" + p)
			if !ok || st.Cursor < 0 || st.BootstrapState != nil {
				return false
			}
		}
	}
	return true
}

// dropSocket closes the client's socket without a close frame.
func (v *vclient) dropSocket() bool {
	v.mu.Lock()
	rt := v.rt
	v.mu.Unlock()
	if rt == nil {
		return false
	}
	_ = rt.Drop()
	return true
}

// httpClient is the client side of every request: bounded, so that a
// request to a killed process fails instead of hanging.
func httpClient() *http.Client {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     30 * time.Second,
	}
	return &http.Client{Transport: tr, Timeout: 60 * time.Second}
}

// compileSchema parses the soak schema.
func compileSchema(data []byte) (*schema.Compiled, error) {
	s, err := schema.ParseJSON(data)
	if err != nil {
		return nil, err
	}
	return schema.Compile(s)
}
