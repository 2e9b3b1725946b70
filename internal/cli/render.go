package cli

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/syncgo/syncgo/wire"
)

// runRender decodes an SSP2 message or SSG2 segment and prints its §11.1
// rendering, or the decode error with its protocol code.
func runRender(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("render", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var in io.Reader = stdin
	if fs.NArg() > 0 {
		f, err := os.Open(fs.Arg(0))
		if err != nil {
			fmt.Fprintln(stderr, "render:", err)
			return 1
		}
		defer f.Close()
		in = f
	}
	data, err := io.ReadAll(io.LimitReader(in, 256<<20))
	if err != nil {
		fmt.Fprintln(stderr, "render:", err)
		return 1
	}
	out, err := render(data)
	if err != nil {
		fmt.Fprintln(stderr, "render:", err)
		return 1
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, out, "", "  "); err != nil {
		fmt.Fprintln(stderr, "render:", err)
		return 1
	}
	pretty.WriteByte('\n')
	_, _ = stdout.Write(pretty.Bytes())
	return 0
}

func render(data []byte) ([]byte, error) {
	if bytes.HasPrefix(data, []byte("SSG2")) {
		seg, err := wire.DecodeSegment(data)
		if err != nil {
			return nil, err
		}
		v, err := wire.RenderSegment(seg)
		if err != nil {
			return nil, err
		}
		return json.Marshal(v)
	}
	msg, err := wire.DecodeMessage(data, wire.DecoderOptions{})
	if err != nil {
		return nil, err
	}
	return wire.RenderMessage(msg)
}
