package engine

import "encoding/binary"

// columnVersions decodes a row's _sync_column_versions record (§2.2):
// LEB128 (ordinal, version) pairs for the columns whose version exceeds 1.
// A row without a record has every column at its server version.
func columnVersions(blob []byte, n int, serverVersion int64) []int64 {
	out := make([]int64, n)
	if blob == nil {
		for i := range out {
			out[i] = serverVersion
		}
		return out
	}
	for i := range out {
		out[i] = 1
	}
	for len(blob) > 0 {
		ord, k := binary.Uvarint(blob)
		if k <= 0 {
			break
		}
		blob = blob[k:]
		ver, k := binary.Uvarint(blob)
		if k <= 0 {
			break
		}
		blob = blob[k:]
		if ord < uint64(n) {
			out[ord] = int64(ver)
		}
	}
	return out
}

// encodeColumnVersions encodes per-column versions, listing those above 1.
// A record with no such column still lists pk at 1: an empty record could
// be stored as no record, which reads as every column at the row's version.
func encodeColumnVersions(versions []int64, pk int) []byte {
	out := []byte{}
	for i, v := range versions {
		if v > 1 {
			out = binary.AppendUvarint(out, uint64(i))
			out = binary.AppendUvarint(out, uint64(v))
		}
	}
	if len(out) == 0 {
		out = binary.AppendUvarint(out, uint64(pk))
		out = binary.AppendUvarint(out, 1)
	}
	return out
}
