package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// TestConformanceCommand runs the command path of the binary: it must
// announce READY <port>, serve /__conformance/info there and exit 0 when
// its context ends.
func TestConformanceCommand(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdoutR, stdoutW := io.Pipe()
	var stderr bytes.Buffer
	exit := make(chan int, 1)
	go func() {
		code := Run(ctx, []string{"conformance", "--listen", "127.0.0.1:0"}, nil, stdoutW, &stderr)
		stdoutW.Close()
		exit <- code
	}()

	lines := bufio.NewScanner(stdoutR)
	if !lines.Scan() {
		t.Fatalf("no READY line (exit %d): %s", <-exit, stderr.String())
	}
	portText, ok := strings.CutPrefix(lines.Text(), "READY ")
	port, err := strconv.Atoi(portText)
	if !ok || err != nil || port <= 0 {
		t.Fatalf("first stdout line %q, want READY <port>", lines.Text())
	}
	go io.Copy(io.Discard, stdoutR)

	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/__conformance/info", port))
	if err != nil {
		t.Fatal(err)
	}
	var info struct{ Name string }
	err = json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || info.Name != "syncgo" {
		t.Errorf("info: %d %+v %v, want 200 syncgo", resp.StatusCode, info, err)
	}

	cancel()
	if code := <-exit; code != 0 {
		t.Errorf("exit code %d after cancel, want 0; stderr: %s", code, stderr.String())
	}
}

func TestConformanceCommandRefusesNonLoopback(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	code := Run(context.Background(), []string{"conformance", "--listen", "0.0.0.0:0"}, nil, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "loopback") || stdout.Len() != 0 {
		t.Errorf("exit %d, stdout %q, stderr %q: want exit 1, no READY, a loopback refusal", code, stdout.String(), stderr.String())
	}
}
