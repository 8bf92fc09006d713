package middleware_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/dimension"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/middleware"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memory"
)

// Two calls per minute per client IP, told to clients in the IETF fields.
func ExampleMiddleware_Handler() {
	cfg, err := policy.Parse("rules.yaml", []byte(`
domain: api
descriptors:
  - key: remote_address
    rate_limit: {name: per-ip, unit: minute, requests_per_unit: 2}
`))
	if err != nil {
		log.Fatal(err)
	}
	// A fixed clock keeps the output stable: 20 s into a minute.
	now := func() time.Time { return time.Date(2025, 1, 1, 0, 0, 20, 0, time.UTC) }
	st, _ := memory.New(memory.WithClock(now))
	defer st.Close()
	engine, _ := policy.NewEngine(cfg, st)
	x, _ := dimension.NewExtractor(dimension.Spec{Descriptors: []dimension.DescriptorSpec{
		{Entries: []dimension.EntrySpec{{Source: "remote_address"}}},
	}})
	limit, err := middleware.New(engine, "api", x)
	if err != nil {
		log.Fatal(err)
	}
	h := limit.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	}))
	for range 3 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/hello", nil))
		fmt.Printf("%d %s %s retry=%q\n", w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))
	}
	// Output:
	// 200 "per-ip";q=2;w=60 "per-ip";r=1;t=40 retry=""
	// 200 "per-ip";q=2;w=60 "per-ip";r=0;t=40 retry=""
	// 429 "per-ip";q=2;w=60 "per-ip";r=0;t=40 retry="40"
}

// A limit per user, the key a function of the request (here the
// X-User header a session layer set; anything a handler can compute
// works, and a request that yields "" has no user: no user entry, so the
// per-user rule does not apply to it).
func ExampleMiddleware_Handler_perUser() {
	cfg, err := policy.Parse("rules.yaml", []byte(`
domain: api
descriptors:
  - key: user
    rate_limit: {name: per-user, unit: minute, requests_per_unit: 1}
`))
	if err != nil {
		log.Fatal(err)
	}
	now := func() time.Time { return time.Date(2025, 1, 1, 0, 0, 20, 0, time.UTC) }
	st, _ := memory.New(memory.WithClock(now))
	defer st.Close()
	engine, _ := policy.NewEngine(cfg, st)
	userOf := func(r *http.Request) string { return r.Header.Get("X-User") }
	x, err := dimension.NewExtractor(dimension.Spec{Descriptors: []dimension.DescriptorSpec{
		{Entries: []dimension.EntrySpec{{Source: "user"}}},
	}}, dimension.WithUser(userOf))
	if err != nil {
		log.Fatal(err)
	}
	limit, err := middleware.New(engine, "api", x)
	if err != nil {
		log.Fatal(err)
	}
	h := limit.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for _, user := range []string{"ana", "ana", "bo", ""} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-User", user)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("user=%q %d %s\n", user, w.Code, w.Header().Get("RateLimit"))
	}
	// Output:
	// user="ana" 200 "per-user";r=0;t=40
	// user="ana" 429 "per-user";r=0;t=40
	// user="bo" 200 "per-user";r=0;t=40
	// user="" 200
}

// Three calls per minute per client IP, without a rules file: a Limiter
// and the client-IP key (here nobody is a trusted proxy; behind one, name
// its networks: middleware.ClientIPKey("10.0.0.0/8")).
func ExampleForLimiter() {
	now := func() time.Time { return time.Date(2025, 1, 1, 0, 0, 20, 0, time.UTC) }
	st, _ := memory.New(memory.WithClock(now)) // a fixed clock keeps the output stable
	defer st.Close()
	lim, err := limiter.New(st, "per-ip", algo.Params{Algorithm: algo.FixedWindow, Limit: 3, Period: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	limit, err := middleware.ForLimiter(lim, middleware.ClientIPKey())
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	h := limit.Handler(mux)
	for range 4 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/hello", nil))
		fmt.Printf("%d %s %s retry=%q\n", w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))
	}
	// Output:
	// 200 "per-ip";q=3;w=60 "per-ip";r=2;t=40 retry=""
	// 200 "per-ip";q=3;w=60 "per-ip";r=1;t=40 retry=""
	// 200 "per-ip";q=3;w=60 "per-ip";r=0;t=40 retry=""
	// 429 "per-ip";q=3;w=60 "per-ip";r=0;t=40 retry="40"
}
