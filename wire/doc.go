// Package wire is the byte layer of the Syncular sync protocol (SSP2): the
// envelope and its frames for wire versions 1, 2 and 3, the request and
// response grammars, the generated row codec (full and sparse rows), SSG2
// rows segments, the realtime JSON control messages, the canonical JSON
// debug rendering, canonical JSON for digests and the scope digest.
//
// The package depends on the standard library only. Section numbers (§)
// refer to the protocol specification, SPEC.md of syncular/syncular.
//
// # Envelope
//
//	offset size field
//	0      4    magic        "SSP2"
//	4      2    wireVersion  u16 LE: 1, 2 or 3
//	6      1    msgKind      0x01 request, 0x02 response
//	7      1    flags        0x00
//	8      …    frames       frameType u8, frameLength u32 LE, payload; END last
//
// All integers are little-endian and fixed-width. i64 values are limited to
// ±(2^53−1). Strings are u32-length-prefixed UTF-8; opt(T) is a presence
// byte then T; maps are sorted by UTF-16 code units and reject duplicates.
//
// # Decoding and aliasing
//
// Decoders return strings and byte slices that alias the bytes they decode
// from. A streaming [Decoder] reads each frame into a fresh buffer, so its
// values stay valid; the whole-message functions alias their argument, which
// must not be modified while the decoded value is in use.
//
// Every decode failure is a *[DecodeError] whose Code is the protocol error
// code (§1.7): sync.invalid_request, or sync.empty_commit for a commit
// without operations.
package wire
