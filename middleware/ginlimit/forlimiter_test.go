package ginlimit_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/middleware"
	"github.com/floodgate/floodgate/middleware/ginlimit"
	"github.com/floodgate/floodgate/store/memory"
)

// TestForLimiter: on gin, a Limiter keyed by what an authentication
// handler stored in the gin.Context (read through ginlimit.Context):
// exact fields, a refusal that aborts the chain with New's problem body,
// and a request without a key (no user) passing untouched.
func TestForLimiter(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 10, 0, time.UTC)
	st, err := memory.New(memory.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	lim, err := limiter.New(st, "per-user", algo.Params{Algorithm: algo.GCRA, Limit: 30, Period: time.Minute, Burst: 2})
	if err != nil {
		t.Fatal(err)
	}
	limit, err := ginlimit.ForLimiter(lim, middleware.KeyFunc(func(r *http.Request) string {
		return ginlimit.Context(r).GetString("user")
	}))
	if err != nil {
		t.Fatal(err)
	}
	handled := 0
	r := gin.New()
	r.Use(func(c *gin.Context) { c.Set("user", c.GetHeader("X-User")) }, limit)
	r.GET("/x", func(c *gin.Context) { handled++; c.String(200, "x") })
	const refusal = `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",` +
		`"title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,` +
		`"detail":"per-user: rate limit exceeded; retry in 2 s","instance":"/x","violated-policies":["per-user"],"retry-after":2}` + "\n"
	for i, tc := range []struct {
		user, rateLimit, retry string
		status                 int
		body                   string
	}{
		{"ana", `"per-user";r=1;t=2`, "", 200, "x"},
		{"ana", `"per-user";r=0;t=4`, "", 200, "x"},
		{"ana", `"per-user";r=0;t=2`, "2", 429, refusal},
		{"", "", "", 200, "x"},
	} {
		w := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/x", nil)
		req.Header.Set("X-User", tc.user)
		r.ServeHTTP(w, req)
		policy := `"per-user";q=2;w=4`
		if tc.user == "" {
			policy = ""
		}
		if w.Code != tc.status || w.Body.String() != tc.body || w.Header().Get("RateLimit-Policy") != policy ||
			w.Header().Get("RateLimit") != tc.rateLimit || w.Header().Get("Retry-After") != tc.retry {
			t.Errorf("request %d (user %q): %d %q %v", i+1, tc.user, w.Code, w.Body, w.Header())
		}
	}
	if handled != 3 {
		t.Errorf("handler ran %d times, want 3: the refusal must abort the chain", handled)
	}
	if _, err := ginlimit.ForLimiter(lim, middleware.ClientIPKey("not-a-network")); err == nil || !strings.Contains(err.Error(), "ClientIPKey") {
		t.Errorf("bad trusted proxy: %v, want ForLimiter's error", err)
	}
}
