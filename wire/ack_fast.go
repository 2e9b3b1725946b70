package wire

// ParseAckFast recognizes an ack in the compact form clients send,
// {"type":"ack","cursor":N} or {"cursor":N,"type":"ack"} with no
// whitespace and N a JSON integer within ±(2^53−1), without a JSON
// decoder: it is the hot path of a socket's acks (§8.2). It reports ok
// only when [ParseClientMessage] would return Ack{Cursor: N} for the same
// bytes; for anything else (other spellings, other messages, malformed
// acks) it reports !ok and the caller parses the message in full, which
// refuses what the spec calls malformed.
func ParseAckFast(b []byte) (cursor int64, ok bool) {
	const typeFirst, cursorFirst = `{"type":"ack","cursor":`, `{"cursor":`
	switch {
	case hasPrefix(b, typeFirst):
		n, rest, ok := fastInt(b[len(typeFirst):])
		if !ok || string(rest) != "}" {
			return 0, false
		}
		return n, true
	case hasPrefix(b, cursorFirst):
		n, rest, ok := fastInt(b[len(cursorFirst):])
		if !ok || string(rest) != `,"type":"ack"}` {
			return 0, false
		}
		return n, true
	}
	return 0, false
}

func hasPrefix(b []byte, p string) bool {
	return len(b) >= len(p) && string(b[:len(p)]) == p
}

// fastInt reads a JSON integer (no fraction, no exponent, no leading
// zero, not -0) within ±MaxSafeInteger at the start of b.
func fastInt(b []byte) (n int64, rest []byte, ok bool) {
	neg := false
	if len(b) > 0 && b[0] == '-' {
		neg, b = true, b[1:]
	}
	i := 0
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		if i >= 16 { // 2^53−1 has 16 digits
			return 0, nil, false
		}
		n = n*10 + int64(b[i]-'0')
		i++
	}
	switch {
	case i == 0, i > 1 && b[0] == '0', neg && n == 0, n > MaxSafeInteger:
		return 0, nil, false
	}
	if neg {
		n = -n
	}
	return n, b[i:], true
}
