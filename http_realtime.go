package syncgo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/gobwas/ws"

	"github.com/syncgo/syncgo/internal/engine"
	"github.com/syncgo/syncgo/internal/realtime"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
)

// handleRealtime upgrades GET /realtime?clientId=… to the realtime channel
// (§8.1). Authentication runs before the upgrade; a failure is an HTTP
// error, never a socket.
func (s *Server) handleRealtime(w http.ResponseWriter, r *http.Request) {
	const route = "realtime"
	if !s.origins.allowUpgrade(r) {
		s.writeError(w, route, syncerr.New(syncerr.CodeForbidden, "origin not allowed"))
		return
	}
	auth, aerr := s.authenticate(r)
	if aerr != nil {
		s.writeError(w, route, aerr)
		return
	}
	noteActor(w, auth.ActorID)
	clientID := r.URL.Query().Get("clientId")
	if clientID == "" {
		s.writeError(w, route, syncerr.New(syncerr.CodeInvalidRequest, "clientId is required"))
		return
	}
	if p := engine.IdentifierProblem(clientID); p != "" {
		s.writeError(w, route, syncerr.New(syncerr.CodeInvalidClientID, "clientId "+p))
		return
	}
	if !canHijack(w) {
		s.writeError(w, route, errNotHijackable)
		return
	}
	release, refusal := s.sockets.acquire(auth.Partition, auth.ActorID)
	if refusal != nil {
		s.writeError(w, route, refusal)
		return
	}
	upgrader := ws.HTTPUpgrader{}
	if p := auth.WebSocketProtocol; p != "" {
		upgrader.Protocol = func(offered string) bool { return offered == p }
	}
	deflate := false
	if !s.cfg.Realtime.DisableCompression && realtime.ExtensionsParse(r.Header.Values("Sec-WebSocket-Extensions")) {
		upgrader.Negotiate = realtime.NegotiateDeflate(&deflate)
	}
	conn, rw, _, err := upgrader.Upgrade(r, w)
	if err != nil {
		release()
		noteUpgradeFailed(w, err)
		return // the upgrader answered the HTTP error
	}
	var buffered []byte
	if rw != nil && rw.Reader.Buffered() > 0 {
		buffered, _ = rw.Reader.Peek(rw.Reader.Buffered())
		buffered = append([]byte(nil), buffered...)
	}
	err = s.hub.Attach(r.Context(), realtime.Conn{NetConn: conn, Buffered: buffered,
		Auth: engine.Auth{ActorID: auth.ActorID, Partition: auth.Partition}, ClientID: clientID, ExpiresAt: auth.ExpiresAt,
		Deflate: deflate, OnClose: release})
	if err != nil {
		s.cfg.Logger.Error("realtime attach failed", "err", err)
		_ = conn.Close()
		release()
	}
}

// CloseActor closes the sockets of an actor in a partition, /realtime and
// /operations/realtime alike (an empty actor closes every socket of the
// partition): call it when the actor's credentials expire or are
// revoked. It returns how many closed.
func (s *Server) CloseActor(partition, actorID string) int {
	return s.hub.CloseActor(partition, actorID) + s.watch.closeActor(partition, actorID)
}

// RevokeActor makes the realtime channel honour an actor's changed grants
// now: every open socket of the actor in the partition (an empty actor:
// every socket of the partition) has its scopes resolved again through
// ResolveScopes, and registrations of scopes no longer granted are
// narrowed or dropped, with a catch-up wake-up so that the client pulls
// and gets the revocation; no delta of a revoked scope follows. Call it
// after changing what ResolveScopes returns. On a store that several
// processes share (Postgres) every process of the fleet does the same;
// this process has done it when RevokeActor returns, the others shortly
// after. The error reports a failure to notify the other processes.
func (s *Server) RevokeActor(ctx context.Context, partition, actorID string) error {
	s.hub.Reresolve(ctx, partition, actorID)
	if n, ok := s.cfg.Store.(store.GrantNotifier); ok {
		if err := n.NotifyGrants(ctx, partition, actorID); err != nil {
			return fmt.Errorf("syncgo: notify other processes: %w", err)
		}
	}
	return nil
}

// RevokeLease revokes an auth lease by id (§7.3.4): the next round the
// lease would authorize (during an outage of the scope authority) fails
// with sync.auth_lease_revoked, and the partition's open sockets have
// their scopes resolved again (RevokeActor), so a socket served on the
// lease is narrowed now. A later live round issues a fresh lease id.
func (s *Server) RevokeLease(ctx context.Context, partition, leaseID string) error {
	if err := s.eng.RevokeLease(ctx, partition, leaseID); err != nil {
		return fmt.Errorf("syncgo: revoke lease: %w", err)
	}
	return s.RevokeActor(ctx, partition, "")
}

// RealtimeStats counts the realtime channel's sessions, deltas, wakes, and
// drops and closes by reason.
type RealtimeStats = realtime.Stats

// RealtimeStats returns the realtime hub's counters.
func (s *Server) RealtimeStats() RealtimeStats { return s.hub.Stats() }

// ConnState is meant for http.Server.ConnState: the server's HTTP
// connections opened and closed then count toward the bursts after which
// it returns its free memory (Config.ReleaseAfterChurn), as its sockets
// do. After a reconnect storm the clients' HTTP connections close too,
// and each held a goroutine and buffers; without this hook only the
// sockets count.
func (s *Server) ConnState(_ net.Conn, st http.ConnState) {
	if st == http.StateNew || st == http.StateClosed {
		s.hub.AddChurn(1)
	}
}

// errNotHijackable is the failure of a WebSocket upgrade whose
// ResponseWriter cannot hand the connection over: a middleware in front
// of Handler (http.TimeoutHandler, a compressing or recording writer)
// hides http.Hijacker and has no Unwrap method.
var errNotHijackable = errors.New("the http.ResponseWriter cannot be hijacked (it is not a http.Hijacker and does not Unwrap to one): a middleware in front of the handler hides it, so no WebSocket can be opened")

// canHijack reports whether w, or a writer it unwraps to (as
// http.ResponseController unwraps), is a http.Hijacker.
func canHijack(w http.ResponseWriter) bool {
	for w != nil {
		if ow, ok := w.(*observedWriter); ok {
			// Its Hijack hijacks the writer it wraps.
			w = ow.ResponseWriter
			continue
		}
		if _, ok := w.(http.Hijacker); ok {
			return true
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return false
		}
		w = u.Unwrap()
	}
	return false
}
