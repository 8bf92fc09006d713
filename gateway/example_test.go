package gateway_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memory"
)

// A gateway in front of a service that has no limits: two searches per
// minute per client, everything else unlimited.
func ExampleNew() {
	service := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "results for", r.URL.Query().Get("q"))
	}))
	defer service.Close()

	cfg, err := policy.Parse("edge.yaml", []byte(`
domain: edge
gateway:
  routes:
    - name: search
      path_prefix: /search
      methods: [GET]
      descriptors:
        - entries: [{source: remote_address}]
descriptors:
  - key: remote_address
    rate_limit: {name: searches, unit: minute, requests_per_unit: 2}
`))
	if err != nil {
		log.Fatal(err)
	}
	now := func() time.Time { return time.Date(2025, 1, 1, 0, 0, 45, 0, time.UTC) }
	st, _ := memory.New(memory.WithClock(now))
	defer st.Close()
	engine, _ := policy.NewEngine(cfg, st)
	gw, err := gateway.New(cfg, engine, service.URL)
	if err != nil {
		log.Fatal(err)
	}
	front := httptest.NewServer(gw)
	defer front.Close()

	for range 3 {
		resp, err := http.Get(front.URL + "/search?q=floodgate")
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d %s | %s", resp.StatusCode, resp.Header.Get("RateLimit"), body[:min(len(body), 40)])
		if resp.StatusCode != 200 {
			fmt.Println()
		}
	}
	// Output:
	// 200 "searches";r=1;t=15 | results for floodgate
	// 200 "searches";r=0;t=15 | results for floodgate
	// 429 "searches";r=0;t=15 | {"type":"https://iana.org/assignments/ht
}
