//go:build unix

package cli

import "syscall"

// defaultMaxConns is the connection cap when none is set: the process's
// file-descriptor limit (Go raises the soft limit to the hard one at
// start) less a reserve, so that connections can never take the
// descriptors the store needs.
func defaultMaxConns() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == 0 {
		return 4096
	}
	if rl.Cur > 1<<20 {
		return 1<<20 - fdReserve
	}
	return max(int(rl.Cur)-fdReserve, 16)
}
