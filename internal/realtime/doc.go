// Package realtime is the WebSocket channel of the sync server (§8): the
// handshake and hello, delta fan-out with acks and wake-ups, heartbeats,
// presence, and sync rounds over the socket served by the same engine as
// POST /sync.
//
// A connection costs no goroutine for writing: messages go to a bounded
// per-connection queue that a short-lived flusher drains, and a slow
// consumer degrades to wake-ups, then is closed, without ever blocking the
// publisher. Deltas are encoded once per distinct registration and the
// same WebSocket frame bytes are queued on every matching connection.
package realtime
