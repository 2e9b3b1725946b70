package yjs

import (
	"fmt"
	"strings"
)

// dump lists the structs and delete set of an update, for test failures.
func dump(b []byte) string {
	var sb strings.Builder
	r := &reader{b: b}
	n, err := r.uvarint()
	for ; err == nil && n > 0; n-- {
		var ns, client, clock uint64
		ns, _ = r.uvarint()
		client, _ = r.uvarint()
		clock, err = r.uvarint()
		for ; err == nil && ns > 0; ns-- {
			var s strct
			s, err = r.readStruct(clock, false)
			if err != nil {
				break
			}
			fmt.Fprintf(&sb, "%d:%d+%d kind=%d ref=%d", client, clock, s.length, s.kind, s.ref)
			if s.hasOrigin {
				fmt.Fprintf(&sb, " o=%d:%d", s.origin.client, s.origin.clock)
			}
			if s.hasRight {
				fmt.Fprintf(&sb, " r=%d:%d", s.rightOrigin.client, s.rightOrigin.clock)
			}
			if s.parent != nil {
				fmt.Fprintf(&sb, " parent=%x", s.parent)
			}
			fmt.Fprintf(&sb, " content=%q\n", s.content)
			clock = s.end()
		}
	}
	nd, _ := r.uvarint()
	for ; nd > 0; nd-- {
		client, _ := r.uvarint()
		k, _ := r.uvarint()
		fmt.Fprintf(&sb, "ds %d:", client)
		for ; k > 0; k-- {
			c, _ := r.uvarint()
			l, _ := r.uvarint()
			fmt.Fprintf(&sb, " [%d,%d)", c, c+l)
		}
		sb.WriteString("\n")
	}
	if err != nil {
		fmt.Fprintf(&sb, "error %v\n", err)
	}
	return sb.String()
}
