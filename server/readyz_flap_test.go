package server_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/server"
)

// TestReadyzRidesOutASlowStore: readiness pings outside store/resilient's
// per-call timeout and reports not ready only after 3 failed pings in a
// row. A Redis paused (SIGSTOP) for 150 ms, three times the wrapper's
// 50 ms timeout and within the 400 ms readiness deadline — a healthy store
// on a busy CPU — leaves /readyz 200 with no WARN; paused for good, /readyz
// stays 200 for two failed pings, is 503 at the third with one WARN
// "store not answering", and 200 again at the first ping after SIGCONT.
// Before, one ping over 50 ms was a 503 and a WARN.
func TestReadyzRidesOutASlowStore(t *testing.T) {
	rs := testserver.NewRedis(t)
	if rs == nil {
		t.Skip("no redis-server")
	}
	e := newStoreLogEnv(t, "redis://"+rs.Addr, 50*time.Millisecond, server.WithReadiness(3, 400*time.Millisecond))
	admin := httptest.NewServer(e.srv.AdminHandler())
	defer admin.Close()
	readyz := func(when string, want int) {
		t.Helper()
		code, body, _ := do(t, "GET", admin.URL+"/readyz", "", nil)
		if code != want {
			t.Fatalf("/readyz %s: %d %s, want %d\n%s", when, code, body, want, e.log)
		}
	}
	readyz("with the store up", 200)

	if err := rs.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := make(chan error, 1)
	go func() {
		time.Sleep(150 * time.Millisecond) // the store's pause, a real process's timing
		resumed <- rs.Resume()
	}()
	start := time.Now()
	if err := e.srv.CheckStore(context.Background()); err != nil {
		t.Errorf("a ping while the store was paused for 150 ms: %v, want it answered within the readiness deadline", err)
	}
	if err := <-resumed; err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 100*time.Millisecond {
		t.Errorf("the ping took %v: the store was not paused during it", took)
	}
	readyz("after a 150 ms pause", 200)
	if w := e.log.lines("store not answering"); len(w) > 0 {
		t.Fatalf("a 150 ms pause logged %q", w)
	}

	if err := rs.Pause(); err != nil {
		t.Fatal(err)
	}
	defer rs.Resume()
	readyz("after 1 failed ping", 200)
	readyz("after 2 failed pings", 200)
	readyz("after 3 failed pings", 503)
	if w := e.log.lines("store not answering"); len(w) != 1 {
		t.Fatalf("WARN lines after 3 failed pings: %q, want one", w)
	}
	if err := rs.Resume(); err != nil {
		t.Fatal(err)
	}
	// The connection the timed-out pings left may take a ping to replace.
	deadline := time.Now().Add(5 * time.Second)
	for e.srv.CheckStore(context.Background()) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("the store did not answer within 5 s of SIGCONT:\n%s", e.log)
		}
	}
	readyz("after the store answered again", 200)
	if a := e.log.lines("store answering"); len(a) != 2 {
		t.Errorf("INFO lines: %q, want two (the first check, the store back)", a)
	}
}

// A store that has never answered is not ready at its first failed ping:
// there is no answer to keep.
func TestReadyzNotReadyAtOnceFromTheStart(t *testing.T) {
	rs := testserver.NewRedis(t)
	if rs == nil {
		t.Skip("no redis-server")
	}
	e := newStoreLogEnv(t, "redis://"+rs.Addr, 50*time.Millisecond, server.WithReadiness(3, 200*time.Millisecond))
	if err := rs.Pause(); err != nil {
		t.Fatal(err)
	}
	defer rs.Resume()
	admin := httptest.NewServer(e.srv.AdminHandler())
	defer admin.Close()
	code, body, _ := do(t, "GET", admin.URL+"/readyz", "", nil)
	if code != 503 || !strings.Contains(string(body), "not ready: store does not answer: ") {
		t.Fatalf("/readyz on a store paused from the start: %d %s, want 503 at the first failed ping", code, body)
	}
}
