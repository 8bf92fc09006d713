package server_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/metrics"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/server"
	"github.com/floodgate/floodgate/store/redis"
	"github.com/floodgate/floodgate/store/resilient"
)

// logBuffer is a log destination safe to read while the server writes.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// lines returns the lines of the log that contain every one of subs.
func (l *logBuffer) lines(subs ...string) []string {
	var out []string
	for line := range strings.Lines(l.String()) {
		all := true
		for _, s := range subs {
			all = all && strings.Contains(line, s)
		}
		if all {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out
}

const storeLogConfig = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1000}\n"

// storeLogEnv is a server on a Redis through store/resilient (breaker
// cool-down 100 ms, the timeout given; newStoreLogEnv's opts are the
// server's), whose store log and events go to log.
type storeLogEnv struct {
	srv *server.Server
	eng *policy.Engine
	st  *resilient.Store
	m   *metrics.Metrics
	log *logBuffer
}

func newStoreLogEnv(t *testing.T, url string, timeout time.Duration, opts ...server.Option) *storeLogEnv {
	t.Helper()
	inner, err := redis.Open(url, redis.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	e := &storeLogEnv{m: metrics.New(), log: &logBuffer{}}
	log := slog.New(slog.NewTextHandler(e.log, nil))
	sl := server.NewStoreLog(log)
	e.st, err = resilient.New(inner, resilient.WithHooks(sl.Hooks(e.m.StoreHooks())), resilient.WithBreaker(5, 100*time.Millisecond),
		resilient.WithTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.st.Close() })
	cfg, err := policy.Parse("test.yaml", []byte(storeLogConfig))
	if err != nil {
		t.Fatal(err)
	}
	if e.eng, err = policy.NewEngine(cfg, e.st); err != nil {
		t.Fatal(err)
	}
	if e.srv, err = server.New(e.eng, e.st, append([]server.Option{server.WithMetrics(e.m), server.WithLogger(log), server.WithStoreLog(sl)}, opts...)...); err != nil {
		t.Fatal(err)
	}
	return e
}

// backOnStore waits until decisions go to the store again: a fresh key's
// second decision finds the first one's charge (the failure policy, open,
// answers every decision as the first).
func (e *storeLogEnv) backOnStore(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		key := "back" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		if e.decide(t, key).Statuses[0].Decision.Remaining == 999 && e.decide(t, key).Statuses[0].Decision.Remaining == 998 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("decisions did not go back to the store within 10s:\n%s", e.log)
		}
		time.Sleep(20 * time.Millisecond) // the breaker's cool-down, a real process's timing
	}
}

// decide decides one request on key k=value.
func (e *storeLogEnv) decide(t *testing.T, value string) policy.Response {
	t.Helper()
	resp, err := e.eng.Decide(context.Background(), policy.Request{Domain: "d",
		Descriptors: []policy.Descriptor{{Entries: []policy.Entry{{Key: "k", Value: value}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func redisDo(t *testing.T, addr string, args ...string) {
	t.Helper()
	if _, err := testserver.RedisDo(addr, 5*time.Second, args...); err != nil {
		t.Fatalf("%s: %v", strings.Join(args, " "), err)
	}
}

// TestStoreLogReportsTheCauseOnce: a Redis that turns into a replica, or
// whose ACL user loses a command the scripts call, after the server
// started fails every decision. READONLY is an outage, which the failure
// policy (open) answers and the breaker counts; the missing permission is
// the caller's error (store/resilient answers only for outages), returned
// and opening no breaker. The log names the cause in one store error line
// (and for the outage one breaker line and one line of the policy's
// answers), not one per request, while a hundred requests on many keys
// fail and the breaker re-opens after failed probes; the ACL user's
// password shows nowhere. Once the store is fixed, decisions go back to
// it.
func TestStoreLogReportsTheCauseOnce(t *testing.T) {
	const password = "Sup3r-Secr3t"
	cases := []struct {
		name         string
		user         bool
		break_, mend []string
		cause        string
		outage       bool
	}{
		{"replica", false, []string{"REPLICAOF", "127.0.0.1", "1"}, []string{"REPLICAOF", "NO", "ONE"}, "READONLY You can't write against a read only replica.", true},
		{"acl", true, []string{"ACL", "SETUSER", "fg", "-time"}, []string{"ACL", "SETUSER", "fg", "+time"}, "The user executing the script can't run this command", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rs := testserver.NewRedis(t)
			url := "redis://" + rs.Addr
			if tc.user {
				redisDo(t, rs.Addr, append([]string{"ACL", "SETUSER", "fg", "on", ">" + password, "~fg:*"}, redis.ACLRules...)...)
				url = "redis://fg:" + password + "@" + rs.Addr
			}
			e := newStoreLogEnv(t, url, time.Second)
			ctx := context.Background()
			if err := e.srv.CheckStore(ctx); err != nil {
				t.Fatal(err)
			}
			e.backOnStore(t)

			redisDo(t, rs.Addr, tc.break_...)
			for i := range 100 {
				value := "v" + strings.Repeat("x", i%7) + string(rune('a'+i%26))
				_, err := e.eng.Decide(ctx, policy.Request{Domain: "d",
					Descriptors: []policy.Descriptor{{Entries: []policy.Entry{{Key: "k", Value: value}}}}})
				if tc.outage != (err == nil) {
					t.Fatalf("decision %d: error %v, want an error only for a cause that is not an outage", i, err)
				}
				if i%10 == 0 {
					e.srv.CheckStore(ctx)
				}
				time.Sleep(5 * time.Millisecond) // lets the 100 ms cool-down pass, for probes: a real process's timing
			}
			storeErrors := e.log.lines("level=WARN", "store error on take", tc.cause)
			trips := e.log.lines("level=WARN", "store circuit breaker opened", tc.cause)
			fallbacks := e.log.lines("level=WARN", "the failure policy (open) answered", tc.cause)
			wantOutage := 0
			if tc.outage {
				wantOutage = 1
			}
			if len(storeErrors) != 1 || len(trips) != wantOutage || len(fallbacks) != wantOutage {
				t.Errorf("%d store error lines, %d breaker lines and %d lines of the policy's answers naming %q, want 1, %d, %d:\n%s",
					len(storeErrors), len(trips), len(fallbacks), tc.cause, wantOutage, wantOutage, e.log)
			}
			// Readiness logs each change of its own state ("store not
			// answering" when pings fail, "store answering" when one
			// passes): a replica answers PING while decisions fail, so how
			// often it changes depends on when the checks land against the
			// breaker's probes (CI once saw two changes each way). Those
			// lines are bounded by the changes, not by the requests.
			downs := len(e.log.lines("store not answering", tc.cause))
			if ups := len(e.log.lines("store answering")); downs > ups {
				t.Errorf("%d readiness lines \"store not answering\" against %d \"store answering\": a line per change, want no more:\n%s", downs, ups, e.log)
			}
			if n := len(e.log.lines(tc.cause)) - downs; n > 3 {
				t.Errorf("%d lines other than readiness changes name %q for 100 requests, want a few:\n%s", n, tc.cause, e.log)
			}
			if strings.Contains(e.log.String(), "Sup3r") || strings.Contains(e.log.String(), "Secr3t") {
				t.Errorf("the log shows the password:\n%s", e.log)
			}
			for _, ev := range e.srv.Events() {
				if ev.Kind == "store" && strings.Contains(ev.Message, "store circuit breaker opened") && ev.Level != "WARN" {
					t.Errorf("event %+v, want WARN", ev)
				}
			}

			redisDo(t, rs.Addr, tc.mend...)
			e.backOnStore(t)
			if err := e.srv.CheckStore(ctx); err != nil {
				t.Fatal(err)
			}
			t.Logf("log:\n%s", e.log)
		})
	}
}

// TestCheckStoreLogsAStoreDownFromTheStart: a store that does not answer
// the first readiness check is logged at WARN (it used to be logged only
// after it had answered once); once it answers, an INFO line says so,
// once. Connection errors and timeouts open the breaker, which is logged
// with its cause, but are not store errors of their own: the readiness
// check and the breaker report them.
func TestCheckStoreLogsAStoreDownFromTheStart(t *testing.T) {
	rs := testserver.NewRedis(t)
	e := newStoreLogEnv(t, "redis://"+rs.Addr, 50*time.Millisecond)
	if err := rs.Kill(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := e.srv.CheckStore(ctx); err == nil {
		t.Fatal("CheckStore with the store killed: no error")
	}
	if got := e.log.lines("level=WARN", "store not answering"); len(got) != 1 {
		t.Fatalf("%d WARN lines saying the store does not answer after the first check, want 1:\n%s", len(got), e.log)
	}
	e.srv.CheckStore(ctx)
	if got := e.log.lines("store not answering"); len(got) != 1 {
		t.Errorf("a second failed check logged again:\n%s", e.log)
	}
	for range 20 {
		e.decide(t, "down")
	}
	// The connection's first failures read EOF or a reset (the process
	// died under it), later ones a refused connection: either is the
	// cause the line names.
	if got := e.log.lines("level=WARN", "store circuit breaker opened"); len(got) != 1 ||
		!strings.Contains(got[0], "connect") && !strings.Contains(got[0], "EOF") && !strings.Contains(got[0], "reset") {
		t.Errorf("%d WARN lines saying the breaker opened, want 1 naming a connection error:\n%s", len(got), e.log)
	}
	if err := rs.Restart(); err != nil {
		t.Fatal(err)
	}
	e.backOnStore(t)
	deadline := time.Now().Add(10 * time.Second)
	for e.srv.CheckStore(ctx) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("the store does not answer 10s after its restart:\n%s", e.log)
		}
		time.Sleep(20 * time.Millisecond) // the breaker's cool-down, a real process's timing
	}
	e.srv.CheckStore(ctx)
	if got := e.log.lines("level=INFO", "store answering"); len(got) != 1 {
		t.Errorf("%d INFO lines saying the store answers, want 1:\n%s", len(got), e.log)
	}

	if err := rs.Pause(); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		e.decide(t, "paused")
	}
	if err := rs.Resume(); err != nil {
		t.Fatal(err)
	}
	// The pause's timeouts open the breaker with a line naming them —
	// unless that cause was already reported within StoreLogInterval: on
	// a loaded machine a probe of the dead store can time out before the
	// refused connection comes back ("still open, with another failure:
	// … no answer within the timeout"), and a cause is reported once an
	// interval (the skipped openings are counted in the next line).
	opened := e.log.lines("level=WARN", "store circuit breaker opened", "no answer within the timeout")
	before := e.log.lines("level=WARN", "store circuit breaker still open", "no answer within the timeout")
	if len(opened) > 1 || len(opened)+len(before) == 0 {
		t.Errorf("%d WARN lines saying the breaker opened on timeouts (and %d saying it stayed open on one before), want 1 in all:\n%s", len(opened), len(before), e.log)
	}
	if got := e.log.lines("store error on"); len(got) != 0 {
		t.Errorf("connection errors and timeouts logged as store errors:\n%s", e.log)
	}
	t.Logf("log:\n%s", e.log)
}
