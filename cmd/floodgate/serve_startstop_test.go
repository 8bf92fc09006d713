package main

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate/floodgate/internal/testbinary"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memory"
)

// silentListener listens on 127.0.0.1 and accepts connections that it never
// answers, as a store host whose process hangs does; accepted gets a value
// for each connection (the first 64). Everything is closed at the test's
// end.
func silentListener(t *testing.T) (addr string, accepted <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	each := make(chan struct{}, 64)
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed at the test's end
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			select {
			case each <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String(), each
}

// TestServeStopWhileOpeningStore: SIGTERM while serve waits for a store
// that accepted the connection and never answers ends the process within
// a second or two, with exit 0, one INFO line that says the stop was
// asked for before serving (naming the signal and the step) and
// "floodgate stopped"; not the store's timeout error with a hint to set
// --start-degraded. Before, serve waited out the open (4 x --store-timeout,
// 20 s here), then said the store could not be reached and exited 1.
// With --start-degraded, the first open is waited for the same way.
func TestServeStopWhileOpeningStore(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the floodgate binary")
	}
	bin := testbinary.Path(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"store down", nil},
		{"start-degraded", []string{"--start-degraded"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, accepted := silentListener(t)
			args := append([]string{"serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--admin", "127.0.0.1:0",
				"--reload-interval", "0", "--store", "redis://" + addr, "--store-timeout", "5s"}, tc.args...)
			cmd := exec.Command(bin, args...)
			var out, errb lockedBuffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			cmd.WaitDelay = time.Second
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			select {
			case <-accepted: // serve is in the store's open, waiting for an answer
			case err := <-exited:
				t.Fatalf("serve exited (%v) before connecting to the store:\n%s", err, errb.String())
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				<-exited
				t.Fatalf("serve did not connect to the store within 10s:\n%s", errb.String())
			}
			sent := time.Now()
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			var err error
			select {
			case err = <-exited:
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				<-exited
				t.Fatalf("serve still running 10s after SIGTERM during the store's open (killed):\n%s", errb.String())
			}
			took := time.Since(sent)
			log := errb.String()
			if err != nil {
				t.Errorf("exit after SIGTERM during the start: %v, want status 0 after %v:\n%s", err, took, log)
			}
			// Well under a second on an idle machine; 2 s leaves room for
			// a loaded one, against the open's 20 s.
			if took > 2*time.Second {
				t.Errorf("serve took %v to exit after SIGTERM during the store's open, want under 2s:\n%s", took, log)
			}
			var stopLines []string
			for line := range strings.Lines(log) {
				if strings.Contains(line, "signal received") {
					stopLines = append(stopLines, line)
				}
			}
			want := `level=INFO msg="terminated signal received while starting: stopping before serving; `
			if len(stopLines) != 1 || !strings.Contains(stopLines[0], want) || !strings.Contains(stopLines[0], `during="opening the store"`) {
				t.Errorf("log lines naming the signal: %q, want one %s… during=\"opening the store\":\n%s", stopLines, want, log)
			}
			if why, stopped := strings.Index(log, want), strings.Index(log, `level=INFO msg="floodgate stopped"`); stopped < 0 || stopped < why {
				t.Errorf("no INFO \"floodgate stopped\" after the stop's line:\n%s", log)
			}
			for _, not := range []string{"floodgate serving", "floodgate serve:", "--start-degraded", "deadline exceeded", "store not opened"} {
				if strings.Contains(log, not) || strings.Contains(out.String(), not) {
					t.Errorf("the output holds %q after a stop during the start:\nstdout: %s\nstderr: %s", not, out.String(), log)
				}
			}
		})
	}
}

// TestServeStopBeforeStart: a context done before serve starts (a signal
// during the flags' parsing) stops it at the first step, with exit 0 and
// the start's stop line; before, serve started, said it served, and then
// drained.
func TestServeStopBeforeStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errb lockedBuffer
	code := run(ctx, []string{"serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--reload-interval", "0"}, &out, &errb)
	log := errb.String()
	if code != 0 {
		t.Errorf("exit %d, want 0:\n%s", code, log)
	}
	if want := `level=INFO msg="stop requested while starting: stopping before serving; what was opened (the store, the listeners) is closed, no request was taken" during="loading the configuration"`; !strings.Contains(log, want) {
		t.Errorf("log lacks %s:\n%s", want, log)
	}
	if strings.Contains(log, "floodgate serving") || out.String() != "" {
		t.Errorf("serve said it served after a stop before its start:\nstdout: %s\nstderr: %s", out.String(), log)
	}
}

// TestOpenUntil: openUntil returns as soon as its context is done, with
// the context's cause, and the store an open finishes afterwards is
// closed; one that opens first is returned open.
func TestOpenUntil(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		opened := make(chan *memory.Store, 1)
		open := func() (store.Store, error) {
			<-release
			st, err := memory.New()
			opened <- st
			return st, err
		}
		why := errors.New("terminated signal received")
		ctx, cancel := context.WithCancelCause(t.Context())
		returned := make(chan error, 1)
		go func() {
			st, err := openUntil(ctx, open)
			if st != nil {
				t.Errorf("openUntil returned a store after its context was done: %v", st)
			}
			returned <- err
		}()
		synctest.Wait()
		cancel(why)
		synctest.Wait()
		select {
		case err := <-returned:
			if !errors.Is(err, why) {
				t.Errorf("openUntil after the cancel: %v, want the cause %v", err, why)
			}
		default:
			t.Fatal("openUntil still waits for the open after its context was done")
		}
		close(release)
		synctest.Wait()
		if err := (<-opened).Reset(context.Background(), "k"); !errors.Is(err, store.ErrClosed) {
			t.Errorf("the store opened after openUntil returned: Reset = %v, want store.ErrClosed (closed)", err)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		st, err := openUntil(t.Context(), func() (store.Store, error) { return memory.New() })
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if err := st.Reset(t.Context(), "k"); err != nil {
			t.Errorf("the store openUntil returned: Reset = %v, want it open", err)
		}
	})
}

// TestServeStopDegradedRetrying: with --start-degraded and a store that
// accepts connections and never answers, serve serves while its retry
// attempts wait out the store's timeout (4 x --store-timeout, 4 s here);
// SIGTERM during an attempt drains and exits 0 at once. Before, after
// "floodgate stopped" the process waited in the store's Close for the
// attempt to time out (4 s here; 20 s with --store-timeout 5s).
func TestServeStopDegradedRetrying(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the floodgate binary")
	}
	addr, accepted := silentListener(t)
	p := testbinary.Serve(t, nil, "--reload-interval", "0", "--store", "redis://"+addr, "--store-timeout", "1s", "--start-degraded")
	// The first connection was the open at start, which timed out before
	// serve served; the next is a retry's, waiting for its answer.
	for i := range 2 {
		select {
		case <-accepted:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d connections to the store within 10s, want 2 (the open at start, a retry):\n%s", i, p.Stderr())
		}
	}
	sent := time.Now()
	err := p.Stop(syscall.SIGTERM, 10*time.Second)
	took := time.Since(sent)
	if err != nil {
		t.Fatalf("exit after SIGTERM: %v, want status 0:\n%s", err, p.Stderr())
	}
	// Well under a second on an idle machine; 2 s leaves room for a
	// loaded one, against the attempt's 4 s.
	if took > 2*time.Second {
		t.Errorf("serve took %v to exit after SIGTERM during a retry of the store's open, want under 2s:\n%s", took, p.Stderr())
	}
}
