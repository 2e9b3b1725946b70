//go:build !unix

package cli

// defaultMaxConns is the connection cap when none is set, where the
// process has no file-descriptor limit to read.
func defaultMaxConns() int { return 4096 }
