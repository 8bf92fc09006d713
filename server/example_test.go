package server_test

import (
	"fmt"
	"net/http/httptest"
	"strings"

	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/server"
	"github.com/floodgate/floodgate/store/memory"
)

// A server on the memory store, asked through its native HTTP API: the
// third request in the hour is over the limit of 2.
func Example() {
	cfg, _ := policy.Parse("example.yaml", []byte(`
domain: api
descriptors:
  - key: user
    rate_limit: {name: per-user, unit: hour, requests_per_unit: 2}
`))
	st, _ := memory.New()
	defer st.Close()
	engine, _ := policy.NewEngine(cfg, st)
	srv, _ := server.New(engine, st)
	h := srv.HTTPHandler() // serve it with http.Serve, or Serve for all three addresses

	body := `{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"42"}]}]}`
	for range 3 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/decide", strings.NewReader(body)))
		fmt.Println(rec.Code, rec.Header().Get("RateLimit-Policy"), rec.Header().Get("X-RateLimit-Remaining"))
	}
	// Output:
	// 200 "per-user";q=2;w=3600 1
	// 200 "per-user";q=2;w=3600 0
	// 429 "per-user";q=2;w=3600 0
}
