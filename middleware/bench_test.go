package middleware_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/floodgate/floodgate/middleware"
)

// discard is a ResponseWriter that keeps only its header, so that the
// benchmark measures the middleware rather than a recorder.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

// BenchmarkHandler is the middleware's own cost per admitted request:
// descriptors, the Engine's decision on the memory store over 10 000 client
// addresses, and the header fields.
func BenchmarkHandler(b *testing.B) {
	const cfg = `
domain: web
descriptors:
  - key: remote_address
    rate_limit: {name: per-ip, algorithm: token_bucket, unit: second, requests_per_unit: 1, burst: 1000000000}
`
	m, err := middleware.New(engine(b, cfg, nil), "web", extractor(b, perIP))
	if err != nil {
		b.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	reqs := make([]*http.Request, 10_000)
	for i := range reqs {
		reqs[i] = httptest.NewRequest("GET", "/", nil)
		reqs[i].RemoteAddr = fmt.Sprintf("198.18.%d.%d:1234", i/256, i%256)
		h.ServeHTTP(&discard{h: http.Header{}}, reqs[i])
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		w := &discard{h: http.Header{}}
		i := 0
		for pb.Next() {
			clear(w.h)
			h.ServeHTTP(w, reqs[i%len(reqs)])
			i += 7919
		}
	})
}
