// Package e2e tests the real floodgate binary: it builds cmd/floodgate once,
// starts it against real stores (memory, Redis, Redis Cluster, Memcached
// from internal/testserver) and drives it over gRPC, /json and /v1.
package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testbinary"
)

func TestMain(m *testing.M) { os.Exit(testbinary.Main(m)) }

// proc is a running floodgate serve: testbinary's process under the names
// the tests of this package use.
type proc struct {
	bin               *testbinary.Process
	cmd               *exec.Cmd
	http, grpc, admin string
	done              <-chan struct{} // closed once the process has exited
}

// start runs `floodgate serve --config FILE` with config in FILE and args,
// on free loopback ports, and waits until it serves. At the test's end the
// process gets SIGTERM and must exit 0 within 15 s.
func start(t *testing.T, config string, args ...string) *proc {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	p := testbinary.Serve(t, nil, append([]string{"--config", path}, args...)...)
	return &proc{bin: p, cmd: p.Cmd, http: p.HTTP, grpc: p.GRPC, admin: p.Admin, done: p.Done()}
}

// logs returns the process's stderr so far.
func (p *proc) logs() string { return p.bin.Stderr() }

// stop signals the process and waits for it; it returns an error unless
// the process exited 0 in time.
func (p *proc) stop(sig syscall.Signal, wait time.Duration) error { return p.bin.Stop(sig, wait) }

// exitErr returns how the process exited once done is closed (nil: exit
// 0); the cleanup then leaves the exit to the test.
func (p *proc) exitErr() error { return p.bin.ExitErr() }

// get fetches an admin or HTTP URL.
func get(url string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// uniqueDomain names a domain no other run shares (shared test servers).
func uniqueDomain(name string) string {
	return fmt.Sprintf("e2e-%s-%d", strings.ToLower(name), time.Now().UnixNano())
}
