package cli

import (
	"fmt"
	"io"
	"runtime/debug"
)

// versionInfo describes the running binary from its build information:
// the module version (or "(devel)"), the VCS revision and whether the
// tree was modified, and the Go version.
func versionInfo() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "syncgo (no build information)"
	}
	version := binaryVersion()
	revision, modified, when := "", "", ""
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = " (modified)"
			}
		case "vcs.time":
			when = " " + s.Value
		}
	}
	out := "syncgo " + version
	if revision != "" {
		out += " commit " + revision + modified + when
	}
	return out + " " + bi.GoVersion
}

func runVersion(stdout io.Writer) int {
	fmt.Fprintln(stdout, versionInfo())
	return 0
}

// binaryVersion is the module version of the binary, "(devel)" for a
// build from a checkout.
func binaryVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}
