package ginlimit_test

import (
	"fmt"
	"log"
	"net/http/httptest"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/dimension"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/middleware"
	"github.com/floodgate/floodgate/middleware/ginlimit"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memory"
)

// The source article's middleware: a token bucket per client IP on a gin
// router, with X-RateLimit-Limit and X-RateLimit-Remaining.
func ExampleNew() {
	cfg, err := policy.Parse("rules.yaml", []byte(`
domain: api
descriptors:
  - key: remote_address
    rate_limit: {name: per-ip, algorithm: token_bucket, unit: minute, requests_per_unit: 2}
`))
	if err != nil {
		log.Fatal(err)
	}
	now := func() time.Time { return time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC) }
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
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(ginlimit.New(limit))
	r.GET("/ping", func(c *gin.Context) { c.String(200, "pong") })
	for range 3 {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest("GET", "/ping", nil))
		fmt.Printf("%d limit=%s remaining=%s retry=%q\n", w.Code, w.Header().Get("X-RateLimit-Limit"),
			w.Header().Get("X-RateLimit-Remaining"), w.Header().Get("Retry-After"))
	}
	// Output:
	// 200 limit=2 remaining=1 retry=""
	// 200 limit=2 remaining=0 retry=""
	// 429 limit=2 remaining=0 retry="30"
}

// Two requests a minute per client IP, without a rules file: a Limiter
// and the client-IP key.
func ExampleForLimiter() {
	now := func() time.Time { return time.Date(2025, 1, 1, 0, 0, 20, 0, time.UTC) }
	st, _ := memory.New(memory.WithClock(now)) // a fixed clock keeps the output stable
	defer st.Close()
	lim, err := limiter.New(st, "per-ip", algo.Params{Algorithm: algo.FixedWindow, Limit: 2, Period: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	limit, err := ginlimit.ForLimiter(lim, middleware.ClientIPKey())
	if err != nil {
		log.Fatal(err)
	}
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(limit)
	r.GET("/ping", func(c *gin.Context) { c.String(200, "pong") })
	for range 3 {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest("GET", "/ping", nil))
		fmt.Printf("%d %s %s retry=%q\n", w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))
	}
	// Output:
	// 200 "per-ip";q=2;w=60 "per-ip";r=1;t=40 retry=""
	// 200 "per-ip";q=2;w=60 "per-ip";r=0;t=40 retry=""
	// 429 "per-ip";q=2;w=60 "per-ip";r=0;t=40 retry="40"
}
