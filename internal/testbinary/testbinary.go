// Package testbinary builds the floodgate binary and runs `floodgate serve`
// as a real process for tests of any package of the module.
//
// The binary is built once per test process, on the first call of Path or
// Serve, from the module's cmd/floodgate, without -race whatever the tests
// run with (the binary under test is the one users run; a race-enabled
// server would also be several times slower on a loaded machine). It lives
// in a temporary folder that Main removes, so a package that uses Path or
// Serve runs its tests through Main:
//
//	func TestMain(m *testing.M) { os.Exit(testbinary.Main(m)) }
//
// Serve starts the process with every listener on 127.0.0.1:0, waits for
// the line serve prints on stdout once its listeners are bound and its
// store checked, and reads the addresses from it. At the test's end the
// process gets SIGTERM and must exit 0 within StopTimeout; one that does
// not is killed and the test fails. Every wait is bounded.
//
// Process is safe for concurrent use: its output may be read while the
// process writes.
package testbinary

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

const (
	// BuildTimeout bounds `go build` of the binary, a cold one on a busy
	// machine included.
	BuildTimeout = 5 * time.Minute
	// ServeTimeout bounds the wait for serve to say it serves.
	ServeTimeout = 30 * time.Second
	// StopTimeout bounds the wait for the process to exit after the
	// cleanup's SIGTERM.
	StopTimeout = 15 * time.Second
)

var build struct {
	once sync.Once
	main atomic.Bool // Main is running the tests
	dir  string      // the temporary folder of the binary, removed by Main
	path string
	err  error
}

// Main runs the tests of m and then removes the binary that Path built, if
// any. It returns m.Run's exit code, for os.Exit in the package's TestMain.
func Main(m *testing.M) int {
	build.main.Store(true)
	code := m.Run()
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
	return code
}

// Path returns the path of the floodgate binary built from this module's
// cmd/floodgate. The first call builds it and later ones, concurrent ones
// included, wait for that build and share it; a failed build fails every
// caller's test with go build's output. The test package must run its
// tests through Main, which removes the binary at the end.
func Path(tb testing.TB) string {
	tb.Helper()
	if !build.main.Load() {
		tb.Fatal("testbinary: the package's TestMain must run the tests through testbinary.Main, which removes the binary")
	}
	build.once.Do(func() { build.dir, build.path, build.err = buildBinary() })
	if build.err != nil {
		tb.Fatalf("testbinary: %v", build.err)
	}
	return build.path
}

// buildBinary builds ./cmd/floodgate from the module's root, found by `go
// env GOMOD` from the working directory (a test runs in its package's
// folder), into a new temporary folder.
func buildBinary() (dir, path string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), BuildTimeout)
	defer cancel()
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", "", fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	if _, err := os.Stat(filepath.Join(root, "cmd", "floodgate")); err != nil {
		return "", "", fmt.Errorf("the module root %q found by go env GOMOD has no cmd/floodgate: %w", root, err)
	}
	dir, err = os.MkdirTemp("", "floodgate-testbinary-")
	if err != nil {
		return "", "", err
	}
	path = filepath.Join(dir, "floodgate")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", path, "./cmd/floodgate")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return dir, "", fmt.Errorf("go build ./cmd/floodgate in %s: %w\n%s", root, err, out)
	}
	return dir, path, nil
}

// servingLine is serve's line on stdout once it serves; in gateway mode
// (--upstream) it says "gateway http ADDR -> UPSTREAM, decision APIs …"
// before grpc.
var servingLine = regexp.MustCompile(`floodgate serving: (?:gateway )?http (\S+)(?: -> .*?)?, grpc (\S+), admin (\S+) `)

// Process is a running `floodgate serve` started by Serve.
type Process struct {
	// Cmd is the process's command; Cmd.Args the arguments it was given.
	Cmd *exec.Cmd
	// HTTP, GRPC and Admin are the addresses (host:port) of the
	// listeners, as the serving line says them. In gateway mode HTTP is
	// the gateway's.
	HTTP, GRPC, Admin string

	mu             sync.Mutex
	stdout, stderr bytes.Buffer
	serving        []string      // servingLine's match, once stdout has it
	served         chan struct{} // closed when serving is set
	done           chan struct{} // closed when the process has exited and its output is read
	err            error         // how it exited, once done is closed
	judged         atomic.Bool   // the test took the exit in hand: the cleanup does not judge it
}

// Serve runs `floodgate serve` from Path with --http, --grpc and --admin on
// 127.0.0.1:0, then args (a flag given again there wins), with env added
// to the test's environment (nil: the test's environment as it is). It
// returns once serve's stdout says it serves, within ServeTimeout; a
// process that exits first or does not serve in time fails the test with
// its stderr. At the test's end the process gets SIGTERM and must exit 0
// within StopTimeout, unless the test already stopped it with Stop or
// looked at its exit with ExitErr.
func Serve(tb testing.TB, env []string, args ...string) *Process {
	tb.Helper()
	bin := Path(tb)
	all := append([]string{"serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, args...)
	p := &Process{Cmd: exec.Command(bin, all...), served: make(chan struct{}), done: make(chan struct{})}
	p.Cmd.Env = append(os.Environ(), env...)
	p.Cmd.Stdout, p.Cmd.Stderr = stdoutWriter{p}, stderrWriter{p}
	// A process that exits but leaves its output open (a child of its
	// own holding it) does not hold up Wait for more than this.
	p.Cmd.WaitDelay = time.Second
	if err := p.Cmd.Start(); err != nil {
		tb.Fatalf("starting floodgate serve: %v", err)
	}
	// Wait returns once the output is copied: whatever the process wrote
	// is in Stdout and Stderr when Done is closed.
	go func() {
		p.err = p.Cmd.Wait()
		close(p.done)
	}()
	tb.Cleanup(func() {
		if p.judged.Load() {
			return
		}
		if err := p.stop(syscall.SIGTERM, StopTimeout); err != nil {
			tb.Errorf("floodgate serve %v: want exit 0 on SIGTERM at the test's end, got %v\n%s", all[1:], err, p.Stderr())
		}
	})
	select {
	case <-p.served:
	case <-p.done:
		p.judged.Store(true) // reported here
		tb.Fatalf("floodgate serve %v exited before serving: %v\n%s", all[1:], p.err, p.Stderr())
	case <-time.After(ServeTimeout):
		tb.Fatalf("floodgate serve %v did not say it serves within %v\n%s", all[1:], ServeTimeout, p.Stderr())
	}
	p.mu.Lock()
	p.HTTP, p.GRPC, p.Admin = p.serving[1], p.serving[2], p.serving[3]
	p.mu.Unlock()
	return p
}

// stdoutWriter collects the process's stdout and watches it for the
// serving line.
type stdoutWriter struct{ p *Process }

func (w stdoutWriter) Write(b []byte) (int, error) {
	p := w.p
	p.mu.Lock()
	defer p.mu.Unlock()
	n, err := p.stdout.Write(b)
	if p.serving == nil {
		if m := servingLine.FindStringSubmatch(p.stdout.String()); m != nil {
			p.serving = m
			close(p.served)
		}
	}
	return n, err
}

// stderrWriter collects the process's stderr, its log.
type stderrWriter struct{ p *Process }

func (w stderrWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.stderr.Write(b)
}

// Stdout returns what the process has written to stdout so far.
func (p *Process) Stdout() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stdout.String()
}

// Stderr returns what the process has written to stderr, its log, so far.
func (p *Process) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// Done is closed once the process has exited and its output is read.
func (p *Process) Done() <-chan struct{} { return p.done }

// errRunning is ExitErr's answer while the process runs.
var errRunning = errors.New("testbinary: the process is still running")

// ExitErr returns how the process exited once Done is closed: nil for exit
// status 0, else Wait's error (an *exec.ExitError saying the status or the
// signal). Before then it returns an error saying the process runs. Once
// the process has exited, its exit is the test's to judge: the cleanup no
// longer reports it.
func (p *Process) ExitErr() error {
	select {
	case <-p.done:
		p.judged.Store(true)
		return p.err
	default:
		return errRunning
	}
}

// Stop sends sig to the process, unless it has exited already, and waits
// up to wait for it to exit. It returns ExitErr's answer, or, when the
// process did not exit in time, kills it and returns an error saying so.
// The cleanup does not judge the exit again.
func (p *Process) Stop(sig os.Signal, wait time.Duration) error {
	p.judged.Store(true)
	return p.stop(sig, wait)
}

func (p *Process) stop(sig os.Signal, wait time.Duration) error {
	select {
	case <-p.done:
		return p.err
	default:
	}
	p.Cmd.Process.Signal(sig)
	select {
	case <-p.done:
		return p.err
	case <-time.After(wait):
		p.Cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("no exit within %v of %v (killed)", wait, sig)
	}
}
