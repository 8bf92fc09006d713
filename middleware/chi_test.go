package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/floodgate/floodgate/dimension"
	"github.com/floodgate/floodgate/middleware"
)

// The middleware works as chi middleware, router-wide with Use and per
// route with With, where chi's URL parameters are known and can key the
// limit through a caller-supplied user function.
func TestChi(t *testing.T) {
	const cfg = `
domain: web
descriptors:
  - key: remote_address
    rate_limit: {name: per-ip, unit: minute, requests_per_unit: 100}
  - key: user
    rate_limit: {name: per-user, unit: minute, requests_per_unit: 2}
`
	e := engine(t, cfg, newClock(t0))
	global, err := middleware.New(e, "web", extractor(t, perIP))
	if err != nil {
		t.Fatal(err)
	}
	perUser, err := middleware.New(e, "web", extractor(t,
		dimension.Spec{Descriptors: []dimension.DescriptorSpec{{Entries: []dimension.EntrySpec{{Source: "user"}}}}},
		dimension.WithUser(func(r *http.Request) string { return chi.URLParam(r, "user") })))
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	r.Use(global.Handler)
	r.Get("/health", ok)
	r.With(perUser.Handler).Get("/users/{user}", ok)
	srv := httptest.NewServer(r)
	defer srv.Close()

	steps := []struct {
		path   string
		status int
		field  string
	}{
		{"/health", 200, `"per-ip";r=99;t=50`},
		{"/users/ann", 200, `"per-ip";r=98;t=50, "per-user";r=1;t=50`},
		{"/users/ann", 200, `"per-ip";r=97;t=50, "per-user";r=0;t=50`},
		{"/users/ann", 429, `"per-ip";r=96;t=50, "per-user";r=0;t=50`},
		{"/users/bob", 200, `"per-ip";r=95;t=50, "per-user";r=1;t=50`},
		{"/health", 200, `"per-ip";r=94;t=50`}, // six requests passed the router-wide limit
	}
	for i, s := range steps {
		res := get(t, srv.URL+s.path)
		// Per-route limits come after the router-wide one: the route's
		// members follow the router's in the list.
		if res.status != s.status || res.h.Get("RateLimit") != s.field {
			t.Errorf("step %d %s: %d RateLimit %q, want %d %q", i, s.path, res.status, res.h.Get("RateLimit"), s.status, s.field)
		}
	}
}

// With the standard library's mux, patterns included.
func TestServeMux(t *testing.T) {
	e := engine(t, perIPConfig, newClock(t0))
	m, err := middleware.New(e, "web", extractor(t, perIP))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(r.PathValue("id")))
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for i, want := range []int{200, 200, 200, 429} {
		res := get(t, srv.URL+"/items/7")
		if res.status != want || (want == 200 && res.body != "7") {
			t.Errorf("request %d: %d %q, want %d", i, res.status, res.body, want)
		}
	}
}
