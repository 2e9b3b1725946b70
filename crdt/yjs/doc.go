// Package yjs is the server-side merger of the `yjs-doc` crdtType (spec
// §5.10): it merges Yjs updates (update format v1, the bytes of
// Y.encodeStateAsUpdate and of a Y.Doc's update event) into one update
// that Yjs, applied in a client, turns into the same document as applying
// every input to one Y.Doc — without a Y.Doc on the server.
//
// It decodes the lib0 encoding and every Yjs struct (Item with its
// origins, parent and content of every type; GC; Skip) and delete set,
// checking what the JavaScript reader checks; merges the structs of each
// client by clock and unites the delete sets (Merger); and encodes the
// result. A syncgo.Server registers Merger for yjs-doc by default; see
// docs/crdt.md for the semantics and how they are proven against Yjs
// (tools/yjs-equivalence).
package yjs
