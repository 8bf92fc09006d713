package loadgen_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/loadgen"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/server"
	"github.com/floodgate/floodgate/store/memory"
)

// stoppableServer is a floodgate server (server.Serve on the memory store)
// that a test stops and starts again on the same addresses.
type stoppableServer struct {
	mu                      sync.Mutex // stop runs on a timer's goroutine too
	t                       *testing.T
	httpAddr, grpcAddr, adm string
	cancel                  context.CancelFunc
	done                    chan error
	opts                    []server.Option
}

func newStoppableServer(t *testing.T, opts ...server.Option) *stoppableServer {
	s := &stoppableServer{t: t, opts: opts}
	ls, err := s.start("127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.httpAddr, s.grpcAddr, s.adm = ls.HTTP.Addr().String(), ls.GRPC.Addr().String(), ls.Admin.Addr().String()
	t.Cleanup(s.stop)
	return s
}

// restart starts the server again on its addresses; it may run on
// another goroutine than the test's.
func (s *stoppableServer) restart() error {
	_, err := s.start(s.httpAddr, s.grpcAddr, s.adm)
	return err
}

func (s *stoppableServer) start(httpAddr, grpcAddr, adminAddr string) (server.Listeners, error) {
	cfg, err := policy.Parse("bench.yaml", []byte(cfgYAML))
	if err != nil {
		return server.Listeners{}, err
	}
	st, _ := memory.New()
	eng, _ := policy.NewEngine(cfg, st)
	srv, err := server.New(eng, st, s.opts...)
	if err != nil {
		return server.Listeners{}, err
	}
	ls, err := server.Listen(httpAddr, grpcAddr, adminAddr)
	if err != nil {
		st.Close()
		return server.Listeners{}, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ls); st.Close() }()
	s.mu.Lock()
	s.cancel, s.done = cancel, done
	s.mu.Unlock()
	return ls, nil
}

// stop stops the server and waits for it (its listeners closed), once.
func (s *stoppableServer) stop() {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.cancel = nil
	s.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			s.t.Errorf("Serve: %v", err)
		}
	case <-time.After(15 * time.Second):
		s.t.Error("the server did not stop within 15s")
	}
}

// restartAfter stops s after stopAt, once it has counted served requests
// (10 s at most), and starts it again on its addresses downFor later; the
// function it returns waits for that start and fails the test if it
// failed.
func (s *stoppableServer) restartAfter(stopAt time.Duration, served float64, downFor time.Duration) func(t *testing.T) {
	restarted := make(chan error, 1)
	time.AfterFunc(stopAt, func() {
		for i := 0; i < 1000; i++ {
			if n, err := requestsOn(s.adm); err == nil && n >= served {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		s.stop()
		time.Sleep(downFor)
		restarted <- s.restart()
	})
	return func(t *testing.T) {
		t.Helper()
		select {
		case err := <-restarted:
			if err != nil {
				t.Fatalf("starting the server again: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the server did not start again")
		}
	}
}

// config is a run of protocol against s, at a descriptor of a limit no
// run reaches; HTTP posts /json's request as a plain one.
func (s *stoppableServer) config(protocol string) loadgen.Config {
	c := loadgen.Config{Protocol: protocol, Addr: s.httpAddr, Concurrency: 4}
	switch protocol {
	case loadgen.GRPC:
		c.Addr = s.grpcAddr
	case loadgen.HTTP:
		c.Addr, c.Method = "http://"+s.httpAddr+"/json", http.MethodPost
		c.Body = []byte(`{"domain":"bench","descriptors":[{"entries":[{"key":"open","value":"x"}]}]}`)
		return c
	}
	c.Domain, c.Descriptors = "bench", [][]loadgen.Entry{{{Key: "open", Value: "x"}}}
	return c
}

var everyProtocol = []string{loadgen.GRPC, loadgen.JSON, loadgen.V1, loadgen.HTTP}

// TestServerGoneEndsRun: a server that goes away mid-run ends the run
// within DownAfter (and a little) of its going, with the counts so far,
// StopServerDown, the error and an "ended" line saying so. Before, the run
// went on to its bound (here a minute) failing every request.
func TestServerGoneEndsRun(t *testing.T) {
	for _, p := range everyProtocol {
		t.Run(p, func(t *testing.T) {
			srv := newStoppableServer(t)
			// The server goes once it has answered the run (10 requests
			// counted), not at a fixed time: a run whose first answers came
			// later than that on a loaded machine had none before it.
			stopped := make(chan time.Time, 1)
			go func() {
				for i := 0; i < 1000; i++ { // 10 s at most
					if n, err := requestsOn(srv.adm); err == nil && n >= 10 {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
				srv.stop()
				stopped <- time.Now()
			}()
			cfg := srv.config(p)
			cfg.Requests, cfg.Duration, cfg.DownAfter = 1e9, time.Minute, 500*time.Millisecond
			res, err := loadgen.Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			var took time.Duration // since the server's going
			select {
			case at := <-stopped:
				took = time.Since(at)
			case <-time.After(15 * time.Second):
				t.Fatal("the server was not stopped")
			}
			var out bytes.Buffer
			res.Print(&out)
			ended := regexp.MustCompile(`\nended       server gone after \d+\.\d\ds: no answer for 500ms, requests failing to reach it \(.+\): [1-9]\d* of 1000000000 requests done\n`)
			if res.Stop != loadgen.StopServerDown || took > 5*time.Second || res.Admitted == 0 || res.Errors == 0 ||
				res.DownError == "" || !ended.MatchString(out.String()) {
				t.Errorf("stop %v after %v, admitted %d, errors %d, down error %q; report:\n%s\nwant StopServerDown within 5s of the server's going, answers before it, errors after, and an ended line saying so",
					res.Stop, took, res.Admitted, res.Errors, res.DownError, out.String())
			}
			t.Logf("%s: %v, %d admitted, %d errors, %q", p, took, res.Admitted, res.Errors, res.DownError)
		})
	}
}

// TestBriefPauseDoesNotEndRun: a server stopped and started again on the
// same addresses within 300ms is reached again, over HTTP/1.1 at the next
// dial and over gRPC within the reconnection backoff (at most a second),
// so a run with DownAfter 2s goes on to its time bound, answered after the
// pause.
func TestBriefPauseDoesNotEndRun(t *testing.T) {
	for _, p := range everyProtocol {
		t.Run(p, func(t *testing.T) {
			srv := newStoppableServer(t)
			// The pause comes once the run is under way (10 requests
			// counted), not at 500 ms alone: a run slower than that to start
			// began after it, and saw no errors.
			restarted := srv.restartAfter(500*time.Millisecond, 10, 300*time.Millisecond)
			cfg := srv.config(p)
			cfg.Duration, cfg.DownAfter = 3*time.Second, 2*time.Second
			res, err := loadgen.Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			restarted(t)
			// Answers after the pause: the restarted server counted them.
			answered := serverRequests(t, srv.adm)
			if res.Stop != loadgen.StopDuration || res.Errors == 0 || answered == 0 {
				t.Errorf("stop %v, admitted %d, errors %d (%q), %v answered by the restarted server; want the time bound to end the run, the pause seen as errors, answers after it",
					res.Stop, res.Admitted, res.Errors, res.FirstErrors, answered)
			}
		})
	}
}

// serverRequests sums floodgate_requests_total on the admin address.
func serverRequests(t *testing.T, admin string) float64 {
	t.Helper()
	n, err := requestsOn(admin)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// requestsOn sums floodgate_requests_total on the admin address.
func requestsOn(admin string) (float64, error) {
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	var sum float64
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "floodgate_requests_total{") {
			var v float64
			fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
			sum += v
		}
	}
	return sum, nil
}

// TestDownAfterZeroNeverStops: without DownAfter a run against a server
// gone goes on to its bound, as before.
func TestDownAfterZeroNeverStops(t *testing.T) {
	srv := newStoppableServer(t)
	srv.stop()
	res, err := loadgen.Run(context.Background(), loadgen.Config{Protocol: loadgen.JSON, Addr: srv.httpAddr, Duration: 700 * time.Millisecond, Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stop != loadgen.StopDuration || res.Errors == 0 {
		t.Errorf("stop %v, errors %d; want the time bound, every request failed", res.Stop, res.Errors)
	}
}

// TestConnectionError: what says the server is gone, and what does not
// (an answer, a timeout, an Unavailable the server sent: floodgate's when
// its store fails).
func TestConnectionError(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&url.Error{Op: "Post", URL: "http://x/json", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}, true},
		{&url.Error{Op: "Post", URL: "http://x/json", Err: io.EOF}, true},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`), true},
		{status.Error(codes.Unavailable, "error reading from server: EOF"), true},
		{status.Error(codes.Unavailable, "store: unavailable: dial tcp 127.0.0.1:6379: connect: connection refused"), false},
		{status.Error(codes.DeadlineExceeded, "context deadline exceeded"), false},
		{&url.Error{Op: "Post", URL: "http://x/json", Err: context.DeadlineExceeded}, false},
		{errors.New("HTTP 500: broken"), false},
		{nil, false},
	} {
		if got := loadgen.ConnectionError(c.err); got != c.want {
			t.Errorf("ConnectionError(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestConnectionErrorsPause: a caller whose request could not reach the
// server waits connErrorPause (10 ms) before its next one, instead of
// failing thousands of requests a second on a core while the server is
// away: 4 callers for 300 ms fail at most about 4 × 31 requests.
func TestConnectionErrorsPause(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	for _, p := range []string{loadgen.JSON, loadgen.GRPC} {
		res, err := loadgen.Run(context.Background(), loadgen.Config{Protocol: p, Addr: addr,
			Duration: 300 * time.Millisecond, Concurrency: 4, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if res.Errors == 0 || res.Errors > 4*31 {
			t.Errorf("%s: %d requests failed in 300 ms by 4 callers; want 1 to %d (a 10 ms pause after each)", p, res.Errors, 4*31)
		}
	}
}

// TestServerErrorsAreAnswers: a server that answers every call with an
// error status of its own (here INVALID_ARGUMENT: more descriptors than it
// takes) is answering, over gRPC as over HTTP, so a restart shorter than
// DownAfter does not end the run. gRPC's statuses carry no HTTP status,
// and such a run was declared gone at the first connection error after
// DownAfter of answered errors.
func TestServerErrorsAreAnswers(t *testing.T) {
	for _, p := range []string{loadgen.GRPC, loadgen.JSON} {
		t.Run(p, func(t *testing.T) {
			srv := newStoppableServer(t, server.WithLimits(server.Limits{EnvoyDescriptors: 1}))
			// The server stops once the run has had more than DownAfter (2 s)
			// of answered errors, at 2.5 s, and is away 300 ms and its own
			// stop and start; its answers (over gRPC after a reconnection
			// backoff) are seen again within DownAfter, with room for a
			// loaded machine's slower stop and start.
			restarted := srv.restartAfter(2500*time.Millisecond, 0, 300*time.Millisecond)
			cfg := srv.config(p)
			cfg.Descriptors = append(cfg.Descriptors, cfg.Descriptors[0]) // two: refused
			cfg.Duration, cfg.DownAfter = 4*time.Second, 2*time.Second
			res, err := loadgen.Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			restarted(t)
			if res.Stop != loadgen.StopDuration || res.Admitted != 0 || res.Errors == 0 {
				t.Errorf("stop %v, admitted %d, errors %d (%q), down error %q; want the time bound to end a run the server answered with errors",
					res.Stop, res.Admitted, res.Errors, res.FirstErrors, res.DownError)
			}
		})
	}
}
