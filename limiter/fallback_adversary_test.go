package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/redis"
	"github.com/floodgate/floodgate/store/resilient"
)

// fallbackRig is a limiter on store/resilient (FailOpen) over a private
// redis-server that the test kills and restarts.
type fallbackRig struct {
	srv   *testserver.Server
	inner *redis.Store
	l     *limiter.Limiter
	limit *algo.Limit
}

func newFallbackRig(t *testing.T, p algo.Params) *fallbackRig {
	t.Helper()
	srv := testserver.NewRedis(t)
	clock := func() time.Time { return time.Date(2026, 3, 1, 10, 30, 0, 0, time.UTC) }
	inner, err := redis.Open("redis://"+srv.Addr, redis.WithTestClock(clock), redis.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := resilient.New(inner, resilient.WithPolicy(resilient.FailOpen), resilient.WithTimeout(2*time.Second),
		resilient.WithBreaker(1000, time.Millisecond), resilient.WithOverLimitCache(0), resilient.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	l := newLimiter(t, rs, "fb", p)
	return &fallbackRig{srv: srv, inner: inner, l: l, limit: l.Limit()}
}

// down kills the server: the store's calls fail and FailOpen answers.
func (r *fallbackRig) down(t *testing.T) {
	t.Helper()
	if err := r.srv.Kill(); err != nil {
		t.Fatal(err)
	}
}

// up restarts the server (empty) and waits until the store reaches it.
func (r *fallbackRig) up(t *testing.T) {
	t.Helper()
	if err := r.srv.Restart(); err != nil {
		t.Fatal(err)
	}
	out := make([]algo.Decision, 1)
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := r.inner.Peek(t.Context(), []store.Request{{Key: "fb:ping", Limit: r.limit}}, out)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis did not come back: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// takeLive takes one unit of key on the store itself, not through the
// failure policy, retrying a call that meets a connection the restart
// broke.
func (r *fallbackRig) takeLive(t *testing.T, key string) algo.Decision {
	t.Helper()
	out := make([]algo.Decision, 1)
	reqs := []store.Request{{Key: r.l.StoreKey(key), Limit: r.limit, Cost: 1}}
	var err error
	for range 50 {
		if _, err = r.inner.Take(t.Context(), reqs, out); err == nil {
			return out[0]
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("Take on the live store: %v", err)
	return algo.Decision{}
}

// spend admits the whole budget of key on the live store.
func (r *fallbackRig) spend(t *testing.T, key string, budget int) {
	t.Helper()
	for i := range budget {
		if d := r.takeLive(t, key); !d.Allowed {
			t.Fatalf("take #%d on the live store = %+v; want admitted", i+1, d)
		}
	}
}

// wantSpent wants the next unit of key refused by the live store.
func (r *fallbackRig) wantSpent(t *testing.T, key, after string) {
	t.Helper()
	if d := r.takeLive(t, key); d.Allowed {
		t.Fatalf("after %s, a take = %+v; want refused: the store holds the budget of 3 spent, "+
			"and giving back a failure policy's admission handed it a unit it never charged", after, d)
	}
}

// A failure policy's admission charged nothing on the store (its
// store.Result says Fallback): giving it back there — Reservation.Cancel,
// Result.Cancel, AllowAll's roll-back, a Wait whose hold is cut short —
// handed the store a unit it never charged, once it was back, and the key
// admitted budget + 1. The engine already skipped such refunds.
func TestAdversaryFallbackAdmissionIsNotRefunded(t *testing.T) {
	p := algo.Params{Algorithm: algo.FixedWindow, Limit: 3, Period: time.Hour}
	r := newFallbackRig(t, p)
	ctx := t.Context()

	r.down(t)
	res, err := r.l.Reserve(ctx, "reserve", 1)
	if err != nil || !res.OK() {
		t.Fatalf("Reserve with the store down = %+v, %v; want FailOpen's admission", res, err)
	}
	all, err := limiter.AllowAll(ctx, []limiter.Hit{{Limiter: r.l, Key: "allowall"}})
	if err != nil || !all.Allowed {
		t.Fatalf("AllowAll with the store down = %+v, %v; want FailOpen's admission", all, err)
	}
	r.up(t)

	r.spend(t, "reserve", 3)
	if err := res.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	r.wantSpent(t, "reserve", "Reservation.Cancel of a fallback admission")

	r.spend(t, "allowall", 3)
	if err := all.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	r.wantSpent(t, "allowall", "Result.Cancel of a fallback admission")
}

// upFirst is a store that runs up before its first Take: the shared
// store comes back between AllowAll's groups.
type upFirst struct {
	store.Store
	up func()
}

func (u *upFirst) Take(ctx context.Context, reqs []store.Request, out []algo.Decision) (store.Result, error) {
	if u.up != nil {
		u.up()
		u.up = nil
	}
	return u.Store.Take(ctx, reqs, out)
}

// AllowAll over two stores rolls back the groups taken before a refusing
// one; a group the failure policy admitted must not be refunded on the
// store, which is back by the time of the roll-back.
func TestAdversaryAllowAllRollbackSkipsFallback(t *testing.T) {
	p := algo.Params{Algorithm: algo.FixedWindow, Limit: 3, Period: time.Hour}
	r := newFallbackRig(t, p)
	ctx := t.Context()
	second := &upFirst{Store: newStore(t)}
	other := newLimiter(t, second, "other", algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: time.Hour})
	if d, err := other.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("spending the other limit: %+v, %v", d, err)
	}
	r.down(t)
	second.up = func() { r.up(t); r.spend(t, "rb", 3) }
	all, err := limiter.AllowAll(ctx, []limiter.Hit{{Limiter: r.l, Key: "rb"}, {Limiter: other, Key: "k"}})
	if err != nil || all.Allowed {
		t.Fatalf("AllowAll = %+v, %v; want refused by the other limit", all, err)
	}
	r.wantSpent(t, "rb", "AllowAll's roll-back of a fallback admission")
}
