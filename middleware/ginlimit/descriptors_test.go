package ginlimit_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/floodgate/floodgate/dimension"
	"github.com/floodgate/floodgate/middleware"
	"github.com/floodgate/floodgate/middleware/ginlimit"
)

// A gin set-up builds its middleware with middleware.New, which refuses an
// extractor whose descriptor no rule limits (here a per-user key the rules
// spell otherwise) with the same error as for net/http, rather than a gin
// handler that lets every request through. Spelt right, it limits.
func TestDescriptorNoRuleLimitsIsAnError(t *testing.T) {
	e := engine(t, `
domain: gin
descriptors:
  - key: user
    rate_limit: {name: per-user, unit: hour, requests_per_unit: 1}
`)
	user := dimension.WithUser(func(r *http.Request) string { return ginlimit.Context(r).GetString("user") })
	spec := func(key string) dimension.Spec {
		return dimension.Spec{Descriptors: []dimension.DescriptorSpec{{Entries: []dimension.EntrySpec{{Source: "user", Key: key}}}}}
	}
	x, err := dimension.NewExtractor(spec("user_id"), user)
	if err != nil {
		t.Fatal(err)
	}
	want := `middleware: extractor descriptors[0] [user_id]: no rule of domain "gin" matches these keys in this order (its top-level keys are user), so this descriptor would limit nothing`
	if _, err := middleware.New(e, "gin", x); err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("New = %v\nwant an error starting %s", err, want)
	}

	x, err = dimension.NewExtractor(spec(""), user)
	if err != nil {
		t.Fatal(err)
	}
	m, err := middleware.New(e, "gin", x)
	if err != nil {
		t.Fatal(err)
	}
	r := gin.New()
	r.Use(func(c *gin.Context) { c.Set("user", "ann") }, ginlimit.New(m))
	r.GET("/ping", func(c *gin.Context) { c.String(200, "pong") })
	for i, status := range []int{200, 429} {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest("GET", "/ping", nil))
		if w.Code != status {
			t.Errorf("request %d: %d, want %d", i, w.Code, status)
		}
	}
}
