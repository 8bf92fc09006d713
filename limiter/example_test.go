package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/headers"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memory"
)

// fixedClock makes the examples' output independent of when they run.
func fixedClock() time.Time { return time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC) }

// Each API key may make 3 calls per minute.
func ExampleNew() {
	st, _ := memory.New(memory.WithClock(fixedClock))
	defer st.Close()
	perKey, err := limiter.New(st, "per-key", algo.Params{Algorithm: algo.FixedWindow, Limit: 3, Period: time.Minute})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := 0; i < 4; i++ {
		d, err := perKey.Allow(ctx, "key-123")
		if err != nil {
			panic(err)
		}
		fmt.Printf("call %d: allowed=%v remaining=%d retry=%v\n", i+1, d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// call 1: allowed=true remaining=2 retry=0s
	// call 2: allowed=true remaining=1 retry=0s
	// call 3: allowed=true remaining=0 retry=0s
	// call 4: allowed=false remaining=0 retry=1m0s
}

// A limiter's store keys start with "fg:", then its name: they stay
// apart from the application's own keys in a shared Redis. WithKeyPrefix
// sets another prefix, or none for the keys of before the prefix.
func ExampleWithKeyPrefix() {
	st, _ := memory.New()
	defer st.Close()
	p := algo.Params{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Second}
	users, _ := limiter.New(st, "user", p)
	tenantB, _ := limiter.New(st, "user", p, limiter.WithKeyPrefix("fg:tenant-b:"))
	old, _ := limiter.New(st, "user", p, limiter.WithKeyPrefix(""))
	fmt.Println(users.StoreKey("42"))
	fmt.Println(tenantB.StoreKey("42"))
	fmt.Println(old.StoreKey("42"))
	// Output:
	// fg:user:42
	// fg:tenant-b:user:42
	// user:42
}

// A reservation is cancelled when the work it was for does not happen:
// the units come back.
func ExampleLimiter_Reserve() {
	st, _ := memory.New(memory.WithClock(fixedClock))
	defer st.Close()
	uploads, _ := limiter.New(st, "uploads", algo.Params{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Hour})
	ctx := context.Background()
	r, err := uploads.Reserve(ctx, "alice", 4)
	if err != nil {
		panic(err)
	}
	fmt.Println("reserved:", r.OK(), "remaining:", r.Decision().Remaining)
	if err := r.Cancel(ctx); err != nil { // the upload failed validation
		panic(err)
	}
	d, _ := uploads.Peek(ctx, "alice", 0)
	fmt.Println("after cancel:", d.Remaining)
	// Output:
	// reserved: true remaining: 6
	// after cancel: 10
}

// Wait blocks until admitted; it says at once when the context's deadline
// is too near, and when a cost can never pass.
func ExampleLimiter_Wait() {
	st, _ := memory.New(memory.WithClock(fixedClock))
	defer st.Close()
	l, _ := limiter.New(st, "reports", algo.Params{Algorithm: algo.GCRA, Limit: 1, Period: time.Minute})
	ctx := context.Background()
	fmt.Println("first:", l.Wait(ctx, "acme", 1))
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	err := l.Wait(short, "acme", 1)
	var re *limiter.RetryError
	fmt.Println("second:", errors.As(err, &re), re.After)
	fmt.Println("cost 2:", errors.Is(l.Wait(ctx, "acme", 2), limiter.ErrNever))
	// Output:
	// first: <nil>
	// second: true 1m0s
	// cost 2: true
}

// A request takes from its tenant's and its user's budgets, all or nothing.
func ExampleAllowAll() {
	st, _ := memory.New(memory.WithClock(fixedClock))
	defer st.Close()
	tenant, _ := limiter.New(st, "tenant", algo.Params{Algorithm: algo.TokenBucket, Limit: 5, Period: time.Second})
	user, _ := limiter.New(st, "user", algo.Params{Algorithm: algo.TokenBucket, Limit: 2, Period: time.Second})
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		res, err := limiter.AllowAll(ctx, []limiter.Hit{
			{Limiter: tenant, Key: "acme", Cost: 1},
			{Limiter: user, Key: "alice", Cost: 1},
		})
		if err != nil {
			panic(err)
		}
		fmt.Printf("request %d: allowed=%v tenant remaining=%d retry=%v\n", i+1, res.Allowed, res.Decisions[0].Remaining, res.RetryAfter())
	}
	// Output:
	// request 1: allowed=true tenant remaining=4 retry=0s
	// request 2: allowed=true tenant remaining=3 retry=0s
	// request 3: allowed=false tenant remaining=3 retry=500ms
}

// At most two reports render at once; a slot comes back on Release.
func ExampleLimiter_Acquire() {
	st, _ := memory.New(memory.WithClock(fixedClock))
	defer st.Close()
	renders, _ := limiter.New(st, "renders", algo.Params{Algorithm: algo.Concurrency, Limit: 2, LeaseTTL: time.Minute})
	ctx := context.Background()
	a, _ := renders.Acquire(ctx, "pdf")
	b, _ := renders.Acquire(ctx, "pdf")
	_, err := renders.Acquire(ctx, "pdf")
	fmt.Println("third:", errors.Is(err, limiter.ErrLimited))
	_ = a.Release(ctx)
	c, err := renders.Acquire(ctx, "pdf")
	fmt.Println("after a release:", err == nil, c.Decision().Remaining)
	_ = b.Release(ctx)
	_ = c.Release(ctx)
	// Output:
	// third: true
	// after a release: true 0
}

// One limiter object with no key, like a single x/time/rate Limiter.
func ExampleNewLocal() {
	l, err := limiter.NewLocal(algo.Params{Algorithm: algo.TokenBucket, Limit: 100, Period: time.Second, Burst: 3},
		limiter.WithLocalClock(fixedClock))
	if err != nil {
		panic(err)
	}
	for i := 0; i < 4; i++ {
		fmt.Print(l.Allow(), " ")
	}
	fmt.Println(l.Take(1).RetryAfter)
	// Output: true true true false 10ms
}

// The limit changes while the limiter runs, as with x/time/rate's SetLimit
// and SetBurst: the tokens left carry over, clamped to the new burst.
func ExampleLocal_SetParams() {
	l, _ := limiter.NewLocal(algo.Params{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Second},
		limiter.WithLocalClock(fixedClock))
	l.AllowN(4)
	fmt.Println("tokens:", l.Peek(0).Remaining)
	if err := l.SetParams(algo.Params{Algorithm: algo.TokenBucket, Limit: 2, Period: time.Second, Burst: 3}); err != nil {
		panic(err)
	}
	fmt.Println("after a lower burst:", l.Peek(0).Remaining, l.Limit())
	l.AllowN(3)
	fmt.Println("next token in:", l.Peek(1).RetryAfter)
	// Output:
	// tokens: 6
	// after a lower burst: 3 token_bucket 2/1s capacity 3
	// next token in: 500ms
}

// A reservation gives its units back with Cancel when the work does not
// happen. A shaper's reservation also says how long to wait before using
// them, as x/time/rate's Reservation.Delay.
func ExampleLocal_Reserve() {
	l, _ := limiter.NewLocal(algo.Params{Algorithm: algo.Shaper, Limit: 10, Period: time.Second, Burst: 5},
		limiter.WithLocalClock(fixedClock))
	a := l.Reserve(2)
	b := l.Reserve(3)
	fmt.Println("a:", a.OK(), a.Delay(), "b:", b.OK(), b.Delay())
	b.Cancel() // the upload b was for failed validation
	c := l.Reserve(1)
	fmt.Println("c:", c.OK(), c.Delay())
	big := l.Reserve(7) // more than the capacity, Burst+1
	fmt.Println("7 at once:", big.OK(), big.Delay() == algo.Never)
	// Output:
	// a: true 0s b: true 200ms
	// c: true 200ms
	// 7 at once: false true
}

// A handler of your own around a bare Limiter, telling clients its state
// with the headers package (the fields the middleware writes).
func ExampleLimiter_Allow_headers() {
	now := func() time.Time { return time.Date(2025, 1, 1, 0, 0, 20, 0, time.UTC) }
	st, _ := memory.New(memory.WithClock(now))
	defer st.Close()
	l, _ := limiter.New(st, "api", algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: time.Minute})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, err := l.Allow(r.Context(), r.RemoteAddr)
		if err != nil {
			http.Error(w, "rate limiter unavailable", http.StatusServiceUnavailable)
			return
		}
		headers.Write(w.Header(), []headers.Policy{headers.FromDecision("per-client", d, time.Minute)}, headers.Options{})
		if !d.Allowed {
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
	for range 2 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		fmt.Printf("%d %s remaining=%s retry=%q\n", w.Code, w.Header().Get("RateLimit"), w.Header().Get("X-RateLimit-Remaining"), w.Header().Get("Retry-After"))
	}
	// Output:
	// 200 "per-client";r=0;t=40 remaining=0 retry=""
	// 429 "per-client";r=0;t=40 remaining=0 retry="40"
}
