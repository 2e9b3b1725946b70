//go:build unix

package bench

import (
	"syscall"
	"time"
)

// raiseFileLimit lifts the soft RLIMIT_NOFILE to the hard limit, for
// runs with many sockets.
func raiseFileLimit() {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < lim.Max {
		lim.Cur = lim.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
}

// selfCPUSeconds is the tool's own user and system CPU time: on a
// machine shared with the server it is the CPU the server did not get.
func selfCPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
