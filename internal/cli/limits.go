package cli

import (
	"os"
	"strconv"
)

// fdReserve is the part of the file-descriptor limit kept out of the
// connection cap: the database files and connections, the listener, logs.
const fdReserve = 64

func envInt(key string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(key)); err == nil {
		return v
	}
	return def
}
