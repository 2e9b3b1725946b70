// Package syncgo is a Go server for the Syncular sync protocol (SSP2).
//
// The protocol's byte layer lives in package wire. The embedding API (a
// Server built from a store and a Config, mounted as an http.Handler) is
// being built in this package; see the README for what works today.
package syncgo

// ProtocolContentType is the content type of SSP2 request and response
// bodies (§1.1).
const ProtocolContentType = "application/vnd.syncular.sync.v2"
