package testbinary

import (
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// recorder is a testing.TB that records Errorf and Fatalf (which ends its
// goroutine, as testing's does) and runs the cleanups when asked.
type recorder struct {
	testing.TB
	mu       sync.Mutex
	failures []string
	cleanups []func()
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

// run calls f with r on a goroutine of its own, as a test, then r's
// cleanups, last first, and returns what failed.
func (r *recorder) run(f func(testing.TB)) []string {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
	return r.failures
}

// Serve returns once the addresses are known and the listeners answer;
// Stop by SIGTERM is a clean exit that the cleanup does not judge again.
func TestServeAndStop(t *testing.T) {
	p := Serve(t, nil, "--reload-interval", "0")
	for _, addr := range []string{p.HTTP, p.GRPC, p.Admin} {
		if !strings.HasPrefix(addr, "127.0.0.1:") {
			t.Errorf("listener on %q, want 127.0.0.1", addr)
		}
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + p.Admin + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(p.Stdout(), "floodgate serving: http "+p.HTTP+",") {
		t.Errorf("healthz %d, stdout %q; want 200 and the serving line", resp.StatusCode, p.Stdout())
	}
	if err := p.ExitErr(); err != errRunning {
		t.Errorf("ExitErr while running = %v, want %v", err, errRunning)
	}
	if err := p.Stop(syscall.SIGTERM, StopTimeout); err != nil || p.ExitErr() != nil {
		t.Fatalf("Stop = %v, ExitErr = %v; want exit 0\n%s", err, p.ExitErr(), p.Stderr())
	}
	if !strings.Contains(p.Stderr(), "floodgate stopped") {
		t.Errorf("stderr lacks the stop's log line:\n%s", p.Stderr())
	}
}

// Each way a process can fail is reported once, by Serve, Stop or the
// cleanup, with the reason.
func TestServeFailures(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(testing.TB)
		want string
	}{
		{"exits before serving", func(tb testing.TB) { Serve(tb, nil, "--no-such-flag") }, "exited before serving: exit status"},
		{"killed, not stopped by the cleanup's SIGTERM", func(tb testing.TB) {
			p := Serve(tb, nil, "--reload-interval", "0")
			p.Cmd.Process.Kill()
			<-p.Done()
		}, "want exit 0 on SIGTERM at the test's end, got signal: killed"},
		{"no exit in time", func(tb testing.TB) {
			p := Serve(tb, nil, "--reload-interval", "0", "--shutdown-delay", "30s")
			if err := p.Stop(syscall.SIGTERM, 200*time.Millisecond); err != nil {
				tb.Errorf("Stop: %v", err)
			}
		}, "Stop: no exit within 200ms of terminated (killed)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{TB: t}
			if got := r.run(tc.test); len(got) != 1 || !strings.Contains(got[0], tc.want) {
				t.Errorf("failures %q, want one saying %q", got, tc.want)
			}
		})
	}
}
