// Package e2e tests the real floodgate binary: it builds cmd/floodgate once,
// starts it against real stores (memory, Redis, Redis Cluster, Memcached
// from internal/testserver) and drives it over gRPC, /json and /v1.
package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "floodgate-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "floodgate")
	out, err := exec.Command("go", "build", "-o", binary, "github.com/floodgate/floodgate/cmd/floodgate").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building floodgate: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running floodgate serve.
type proc struct {
	cmd               *exec.Cmd
	http, grpc, admin string
	mu                sync.Mutex
	stderr            strings.Builder
	done              chan struct{}
	exitErr           error
}

// servingLine is serve's first stdout line; in gateway mode (--upstream)
// it says "gateway http ADDR -> UPSTREAM, decision APIs …" before grpc.
var servingLine = regexp.MustCompile(`floodgate serving: (?:gateway )?http (\S+)(?: -> .*?)?, grpc (\S+), admin (\S+) `)

// start runs `floodgate serve` with args on free loopback ports and waits
// until it serves. The process is stopped (SIGTERM) at the test's end.
func start(t *testing.T, config string, args ...string) *proc {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	all := append([]string{"serve", "--config", path, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, args...)
	p := &proc{cmd: exec.Command(binary, all...), done: make(chan struct{})}
	p.cmd.Env = os.Environ()
	stdout, _ := p.cmd.StdoutPipe()
	stderr, _ := p.cmd.StderrPipe()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The pipes are read to their end before Wait, which closes them:
	// whatever the process wrote before it exited is in p.logs() once
	// p.done is closed.
	stderrRead, stdoutRead := make(chan struct{}), make(chan struct{})
	go func() { // the log, readable while the process runs
		io.Copy(p, stderr)
		close(stderrRead)
	}()
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := servingLine.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case lines <- sc.Text():
				default:
				}
			}
		}
		io.Copy(io.Discard, stdout)
		close(stdoutRead)
	}()
	go func() {
		<-stderrRead
		<-stdoutRead
		p.exitErr = p.cmd.Wait()
		close(p.done)
	}()
	select {
	case l := <-lines:
		m := servingLine.FindStringSubmatch(l)
		p.http, p.grpc, p.admin = m[1], m[2], m[3]
	case <-p.done:
		t.Fatalf("floodgate %v exited before serving: %v\n%s", all, p.exitErr, p.logs())
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		t.Fatalf("floodgate %v did not serve within 30s\n%s", all, p.logs())
	}
	t.Cleanup(func() {
		if err := p.stop(syscall.SIGTERM, 15*time.Second); err != nil {
			t.Errorf("stopping floodgate: %v\n%s", err, p.logs())
		}
	})
	return p
}

// Write collects the process's stderr.
func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.Write(b)
}

func (p *proc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// stop signals the process and waits for it; it returns an error unless
// the process exited 0 in time.
func (p *proc) stop(sig syscall.Signal, wait time.Duration) error {
	select {
	case <-p.done:
		return p.exitErr
	default:
	}
	p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
		return p.exitErr
	case <-time.After(wait):
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("no exit within %v of %v", wait, sig)
	}
}

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
