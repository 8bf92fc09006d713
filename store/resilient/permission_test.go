package resilient_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/redis"
	"github.com/floodgate/floodgate/store/resilient"
)

// TestPermissionIsNotAnOutage: a Redis user whose ACL key pattern does not
// cover the keys gets NOPERM on every Take. That lasts until someone
// changes the ACL, so no failure policy answers for it: under FailOpen and
// FailLocal, 20 Takes of a 2-a-minute limit admit none and each returns
// the store's error (redis.ErrPermission, not store.ErrUnavailable); the
// breaker stays closed (no Fallback hook). Before, every one of the 20 was
// admitted by FailOpen without a word.
func TestPermissionIsNotAnOutage(t *testing.T) {
	addr := testserver.Redis(t)
	if addr == "" {
		t.Skip("no redis-server")
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	user, pass := "fgperm-"+run, "Pw-"+run
	// The store's own keys (fg:*, its start-up probe) are allowed: the
	// store opens; the limiter's keys below are not.
	args := append([]string{"ACL", "SETUSER", user, "reset", "on", ">" + pass, "~fg:*"}, redis.ACLRules...)
	if _, err := testserver.RedisDo(addr, 2*time.Second, args...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = testserver.RedisDo(addr, 2*time.Second, "ACL", "DELUSER", user) })
	l := compile(t, algo.Params{Algorithm: algo.GCRA, Limit: 2, Period: time.Minute})
	for _, pol := range []resilient.Policy{resilient.FailOpen, resilient.FailLocal} {
		t.Run(pol.String(), func(t *testing.T) {
			st, err := redis.Open("redis://"+user+":"+pass+"@"+addr, redis.WithTimeout(2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			fallbacks := 0
			s, err := resilient.New(st, resilient.WithPolicy(pol), resilient.WithTimeout(2*time.Second),
				resilient.WithHooks(resilient.Hooks{Fallback: func(string, resilient.Policy, error) { fallbacks++ }}))
			if err != nil {
				st.Close()
				t.Fatal(err)
			}
			defer s.Close()
			req := []store.Request{{Key: "app:" + run + ":" + pol.String(), Limit: l, Cost: 1}}
			out := make([]algo.Decision, 1)
			admitted := 0
			for i := range 20 {
				res, err := s.Take(context.Background(), req, out)
				if res.Allowed || out[0].Allowed {
					admitted++
				}
				if !errors.Is(err, redis.ErrPermission) || errors.Is(err, store.ErrUnavailable) {
					t.Fatalf("take %d: err %v, want redis.ErrPermission and not store.ErrUnavailable", i+1, err)
				}
			}
			if admitted != 0 || fallbacks != 0 {
				t.Errorf("%d of 20 admitted, %d answered by the policy; want none: a permission error is not an outage", admitted, fallbacks)
			}
		})
	}
}

// TestBreakerClosesOnAnAnswer: a store that comes back from an outage
// answering every call with an error that is no outage — here a Redis
// restarted without the ACL user the store logs in as (WRONGPASS when the
// client reconnects) — has answered: the breaker's half-open probe closes
// it, and the calls after get the store's error, none of them admitted by
// FailOpen. Before, the probe's error was counted for no breaker and the
// breaker stayed open, leaving every other call to the policy: a limit of
// 5 admitted thousands.
func TestBreakerClosesOnAnAnswer(t *testing.T) {
	srv := testserver.NewRedis(t)
	if srv == nil {
		return
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	user, pass := "fgbrk-"+run, "Pw-"+run
	args := append([]string{"ACL", "SETUSER", user, "reset", "on", ">" + pass, "~fg:*"}, redis.ACLRules...)
	if _, err := testserver.RedisDo(srv.Addr, 2*time.Second, args...); err != nil {
		t.Fatal(err)
	}
	st, err := redis.Open("redis://"+user+":"+pass+"@"+srv.Addr, redis.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	c := newClock()
	fallbacks := 0
	s, err := resilient.New(st, resilient.WithPolicy(resilient.FailOpen), resilient.WithTimeout(2*time.Second),
		resilient.WithBreaker(3, time.Second), resilient.WithClock(c.Now),
		resilient.WithHooks(resilient.Hooks{Fallback: func(string, resilient.Policy, error) { fallbacks++ }}))
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	defer s.Close()
	req := []store.Request{{Key: "fg:test:brk:" + run, Limit: compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 5, Period: time.Hour}), Cost: 1}}
	out := make([]algo.Decision, 1)
	take := func() (bool, error) {
		res, err := s.Take(context.Background(), req, out)
		return res.Allowed, err
	}
	if ok, err := take(); !ok || err != nil {
		t.Fatalf("first take: %v %v", ok, err)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	for range 3 { // the outage: the policy answers and the breaker opens
		if _, err := take(); err != nil {
			t.Fatalf("take during the outage: %v (FailOpen answers)", err)
		}
	}
	if err := srv.Restart(); err != nil { // without the user, created at run time
		t.Fatal(err)
	}
	// Past the cool-down the next call probes. The client's first call
	// may still meet the old, broken connection (an outage: the policy
	// answers and the breaker opens again), so probe until the store
	// answers, a bounded number of times.
	err = nil
	for i := 0; i < 10 && !errors.Is(err, redis.ErrPermission); i++ {
		c.Advance(2 * time.Second)
		_, err = take()
	}
	if !errors.Is(err, redis.ErrPermission) {
		t.Fatalf("the probes after the restart: %v, want redis.ErrPermission (WRONGPASS)", err)
	}
	// The client's other connections may still be the broken ones: take
	// until 8 in a row get the store's answer, a bounded number of times.
	for i, inRow := 0, 0; inRow < 8; i++ {
		if i == 40 {
			t.Fatalf("no 8 answers in a row from the store in 40 takes after the restart")
		}
		if _, err := take(); errors.Is(err, redis.ErrPermission) {
			inRow++
		} else {
			inRow = 0
			c.Advance(2 * time.Second) // should an outage answer have opened the breaker
		}
	}
	// The probe's answer closed the breaker: 8 callers at once, 25 takes
	// each, all go to the store and get its error.
	var mu sync.Mutex
	before, admitted, wrong := fallbacks, 0, []error(nil)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			out := make([]algo.Decision, 1)
			for range 25 {
				res, err := s.Take(context.Background(), req, out)
				mu.Lock()
				if res.Allowed {
					admitted++
				}
				if !errors.Is(err, redis.ErrPermission) {
					wrong = append(wrong, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if admitted != 0 || fallbacks != before || len(wrong) != 0 {
		t.Errorf("after the probe: %d of 200 admitted, %d answered by the policy, %d errors not ErrPermission (first %v); want none: the store answers",
			admitted, fallbacks-before, len(wrong), firstErr(wrong))
	}
}

func firstErr(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return errs[0]
}

// TestFailLocalKeepsRefundsOffTheLocalStore: a refund the store cannot
// take (it is down) is lost, and never given to FailLocal's local store:
// the units were charged on the store, and the local store, which never
// charged them, would hand them out once more. A take charged on the store,
// the store killed, the local share of 3 spent, then the first take
// refunded: a fourth local take is refused. Before, it was admitted.
func TestFailLocalKeepsRefundsOffTheLocalStore(t *testing.T) {
	srv := testserver.NewRedis(t)
	if srv == nil {
		return
	}
	st, err := redis.Open("redis://"+srv.Addr, redis.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	s, err := resilient.New(st, resilient.WithPolicy(resilient.FailLocal), resilient.WithTimeout(2*time.Second))
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	defer s.Close()
	req := []store.Request{{Key: "fg:test:localrefund:" + strconv.FormatInt(time.Now().UnixNano(), 36),
		Limit: compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 3, Period: time.Hour}), Cost: 1}}
	out := make([]algo.Decision, 1)
	if res, err := s.Take(context.Background(), req, out); err != nil || !res.Allowed || res.Fallback {
		t.Fatalf("the take on the store: %+v %v", res, err)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if res, err := s.Take(context.Background(), req, out); err != nil || !res.Allowed || !res.Fallback {
			t.Fatalf("local take %d of the share of 3: %+v %v", i+1, res, err)
		}
	}
	_ = s.Refund(context.Background(), req) // the store's unit: lost with the store down
	if res, err := s.Take(context.Background(), req, out); err != nil || res.Allowed {
		t.Errorf("a fourth local take after the refund: %+v %v; want refused: the local share is 3", res, err)
	}
}
