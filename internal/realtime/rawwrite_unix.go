//go:build unix

package realtime

import "syscall"

// rawWrites: a connection's descriptor takes writes that do not wait
// (wsConn.writeNow).
const rawWrites = true

// rawWrite writes b to a non-blocking socket descriptor.
func rawWrite(fd uintptr, b []byte) (int, error) { return syscall.Write(int(fd), b) }
