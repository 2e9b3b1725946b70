// Package realtime is the WebSocket channel of the sync server (§8): the
// handshake and hello, delta fan-out with acks and wake-ups, heartbeats,
// presence, and sync rounds over the socket served by the same engine as
// POST /sync.
//
// A connection costs one goroutine, its reader, and no goroutine for
// writing: messages go to a bounded per-connection queue that a
// short-lived flusher drains, and a slow consumer degrades to wake-ups
// (which coalesce in its queue), then is closed when a write cannot
// complete within the write timeout, without ever blocking the publisher.
//
// Commit notifications are put in sequence order per partition (a missing
// one is waited for, then read back from the store, then given up on as a
// gap) and fanned out by one short-lived goroutine per partition at a
// time, so every session sees commits in order and the notifier never
// waits. Deltas are encoded once per distinct registration set and the
// same WebSocket frame bytes are queued on every matching connection.
//
// A session joins its partition before it reads the partition and its
// client record, silent until hello is queued: a commit that lands while
// it connects is covered by hello. A sync round's final chunk (the one
// ending at END) is queued in the same critical section that installs the
// round's registrations and ends the round, so no delta precedes END and
// a client that starts its next round on reading END is never taken for a
// pipelining one.
//
// permessage-deflate (RFC 7692) is negotiated without context takeover:
// a connection keeps no compressor or inflater between messages. A delta
// is compressed once per registration set, like its encoding, and shared
// by the connections that negotiated the extension; round chunks are
// compressed per connection; client messages are inflated under the same
// bounds as plain ones.
//
// Closing writes a close frame (queued data is dropped), shuts the write
// side and lets the reader discard what still arrives until the peer
// closes or a short linger ends.
package realtime
