package resilient_test

import (
	"context"
	"errors"
	"strconv"
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
