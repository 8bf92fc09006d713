package ginlimit_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/floodgate/floodgate/dimension"
	"github.com/floodgate/floodgate/middleware"
	"github.com/floodgate/floodgate/middleware/ginlimit"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memory"
)

func init() { gin.SetMode(gin.TestMode) }

func engine(t *testing.T, yaml string) *policy.Engine {
	t.Helper()
	cfg, err := policy.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	// A stopped clock: token buckets do not refill during a test.
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	st, err := memory.New(memory.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e, err := policy.NewEngine(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// The source article's set-up: gin, a token bucket per client IP, 1200
// requests at a budget of 1000 that does not refill during the test →
// exactly 1000 × 200 and 200 × 429, with X-RateLimit-Limit and
// X-RateLimit-Remaining on every answer.
func TestArticleScenario(t *testing.T) {
	e := engine(t, `
domain: gin
descriptors:
  - key: remote_address
    rate_limit: {name: per-ip, algorithm: token_bucket, unit: hour, requests_per_unit: 1000}
`)
	x, err := dimension.NewExtractor(dimension.Spec{Descriptors: []dimension.DescriptorSpec{
		{Entries: []dimension.EntrySpec{{Source: "remote_address"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := middleware.New(e, "gin", x)
	if err != nil {
		t.Fatal(err)
	}
	r := gin.New()
	r.Use(ginlimit.New(m))
	var reached atomic.Int64
	r.GET("/ping", func(c *gin.Context) { reached.Add(1); c.String(200, "pong") })
	srv := httptest.NewServer(r)
	defer srv.Close()

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	var ok, limited, other atomic.Int64
	var minRemaining atomic.Int64
	minRemaining.Store(1 << 40)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for next.Add(1) <= 1200 {
				resp, err := client.Get(srv.URL + "/ping")
				if err != nil {
					other.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.Header.Get("X-RateLimit-Limit") != "1000" {
					other.Add(1)
				}
				rem, _ := strconv.ParseInt(resp.Header.Get("X-RateLimit-Remaining"), 10, 64)
				for {
					cur := minRemaining.Load()
					if rem >= cur || minRemaining.CompareAndSwap(cur, rem) {
						break
					}
				}
				switch resp.StatusCode {
				case 200:
					ok.Add(1)
				case 429:
					limited.Add(1)
				default:
					other.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if ok.Load() != 1000 || limited.Load() != 200 || other.Load() != 0 || reached.Load() != 1000 {
		t.Errorf("200s %d, 429s %d, other %d, handler reached %d; want 1000, 200, 0, 1000",
			ok.Load(), limited.Load(), other.Load(), reached.Load())
	}
	if minRemaining.Load() != 0 {
		t.Errorf("lowest X-RateLimit-Remaining %d, want 0", minRemaining.Load())
	}
}

// A refused request aborts the chain with a problem body; the user function
// reads what an earlier gin handler stored.
func TestAbortAndGinContext(t *testing.T) {
	e := engine(t, `
domain: gin
descriptors:
  - key: user
    rate_limit: {name: per-user, unit: minute, requests_per_unit: 1}
`)
	x, err := dimension.NewExtractor(dimension.Spec{Descriptors: []dimension.DescriptorSpec{
		{Entries: []dimension.EntrySpec{{Source: "user"}}}}},
		dimension.WithUser(func(r *http.Request) string {
			if c := ginlimit.Context(r); c != nil {
				return c.GetString("user")
			}
			return ""
		}))
	if err != nil {
		t.Fatal(err)
	}
	m, err := middleware.New(e, "gin", x)
	if err != nil {
		t.Fatal(err)
	}
	r := gin.New()
	auth := func(c *gin.Context) { c.Set("user", c.GetHeader("X-Test-User")) }
	var after atomic.Int64
	r.Use(auth, ginlimit.New(m), func(c *gin.Context) { c.Next(); after.Add(1) })
	r.GET("/", func(c *gin.Context) { c.String(200, "hi") })

	do := func(user string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("X-Test-User", user)
		r.ServeHTTP(w, req)
		return w
	}
	if w := do("ann"); w.Code != 200 || w.Header().Get("RateLimit") == "" {
		t.Fatalf("first: %d %v", w.Code, w.Header())
	}
	w := do("ann")
	var p middleware.Problem
	if w.Code != 429 || json.Unmarshal(w.Body.Bytes(), &p) != nil || len(p.ViolatedPolicies) != 1 || p.ViolatedPolicies[0] != "per-user" {
		t.Fatalf("second: %d %s", w.Code, w.Body)
	}
	if w := do("bob"); w.Code != 200 {
		t.Fatalf("another user: %d", w.Code)
	}
	if after.Load() != 2 {
		t.Errorf("handlers after the limiter ran %d times, want 2 (the refusal aborts)", after.Load())
	}
	if ginlimit.Context(httptest.NewRequest("GET", "/", nil)) != nil {
		t.Error("Context of a plain request is not nil")
	}
}
