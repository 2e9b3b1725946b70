//go:build !unix

package realtime

import "errors"

// rawWrites is false here: every write goes through the net.Conn (a
// flusher goroutine), not the descriptor.
const rawWrites = false

func rawWrite(uintptr, []byte) (int, error) { return 0, errors.ErrUnsupported }
