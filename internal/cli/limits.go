package cli

import (
	"os"
	"strconv"
	"syscall"
)

// fdReserve is the part of the file-descriptor limit kept out of the
// connection cap: the database files and connections, the listener, logs.
const fdReserve = 64

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

func envInt(key string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(key)); err == nil {
		return v
	}
	return def
}
