//go:build !unix

package bench

// raiseFileLimit does nothing here: there is no RLIMIT_NOFILE.
func raiseFileLimit() {}

// selfCPUSeconds is 0 here: the tool's CPU time is read on Unix only.
func selfCPUSeconds() float64 { return 0 }
