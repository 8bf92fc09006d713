package gateway_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/gateway"
)

// A websocket's concurrency slot is released when either side of the
// proxied connection closes, once: an upstream that closed its websocket
// while the client kept its side open held the slot until the client
// closed too, so the key's next websocket was refused meanwhile. Under a
// limit of 1: the upstream closes the first websocket (the client reads
// its end, and keeps the connection open), the second is admitted; when
// the first client closes at last, the second's slot is not given back
// with the first's (a third is refused while the second is open, and
// admitted once it has closed).
func TestUpgradeClosedByUpstreamReleasesSlot(t *testing.T) {
	for _, client := range []time.Duration{0, gateway.DefaultClientTimeout} {
		t.Run(fmt.Sprintf("client_timeout=%v", client), func(t *testing.T) {
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/close" {
					echoUpgraded(w)
					return
				}
				conn, rw, ok := upgrade(w)
				if !ok {
					return
				}
				rw.WriteString("bye\n")
				rw.Flush()
				conn.Close()
			}))
			defer up.Close()
			cfg := `
domain: edge
gateway:
  routes: [{name: ws, descriptors: [{entries: [{source: remote_address}]}]}]
descriptors:
  - key: remote_address
    rate_limit: {name: sockets, algorithm: concurrency, requests_per_unit: 1, lease_ttl: 1m}
`
			ended := make(chan int, 8) // a request the gateway is done with: its status
			srv := front(t, engine(t, cfg, nil), up.URL, gateway.WithClientTimeout(client),
				gateway.WithResponses(func(_ string, status int, _ bool) { ended <- status }))
			dial := func(path string) (net.Conn, *bufio.Reader, int) {
				t.Helper()
				conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
				if err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", path)
				br := bufio.NewReader(conn)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != http.StatusSwitchingProtocols {
					conn.Close()
					<-ended
				}
				return conn, br, resp.StatusCode
			}
			waitEnded := func(what string) {
				t.Helper()
				select {
				case status := <-ended:
					if status != http.StatusSwitchingProtocols {
						t.Fatalf("%s: the gateway ended a request of status %d, want the websocket's 101", what, status)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("%s: the gateway did not end the websocket's request in 10 s", what)
				}
			}

			first, br, status := dial("/close")
			if status != http.StatusSwitchingProtocols {
				t.Fatalf("first websocket: %d, want 101", status)
			}
			defer first.Close()
			if rest, err := io.ReadAll(br); err != nil || string(rest) != "bye\n" {
				t.Fatalf("first websocket, closed by the upstream: read %q %v, want its last message and its end", rest, err)
			}
			// The client keeps its side open.
			second, br2, status := dial("/stay")
			if status != http.StatusSwitchingProtocols {
				t.Fatalf("second websocket, after the upstream closed the first: %d, want 101 (the first's slot released)", status)
			}
			defer second.Close()
			io.WriteString(second, "hello\n")
			if got, err := br2.ReadString('\n'); err != nil || got != "echo hello\n" {
				t.Fatalf("through the second websocket: %q %v", got, err)
			}
			first.Close()
			waitEnded("first websocket closed by its client")
			if third, _, status := dial("/stay"); status != http.StatusTooManyRequests {
				third.Close()
				t.Fatalf("third websocket while the second is open: %d, want 429 (the first's end released the second's slot)", status)
			}
			second.Close()
			waitEnded("second websocket closed by its client")
			third, _, status := dial("/stay")
			third.Close()
			if status != http.StatusSwitchingProtocols {
				t.Fatalf("third websocket once the second closed: %d, want 101", status)
			}
		})
	}
}
