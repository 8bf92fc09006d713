package gateway_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// A client's HTTP2-Settings field, part of an h2c offer and of the
// connection only (RFC 7540 §3.2.1), never reaches the upstream, whether
// or not Connection names it: ReverseProxy drops it only when it does,
// and an upstream that switches on Upgrade: h2c with the field, reading
// no further, must not get it from a client that left it out.
func TestH2CSettingsNotPassedOn(t *testing.T) {
	for _, kind := range []string{"http", "h2c"} {
		t.Run(kind, func(t *testing.T) {
			var got atomic.Int64
			up, _ := startUpstream(t, kind, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Http2-Settings") != "" {
					got.Add(1)
				}
			}))
			srv := front(t, engine(t, h2Config, newClock(t0)), up)
			for _, hdr := range []string{
				"Connection: Upgrade\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n",
				"HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n",
				"Connection: keep-alive\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n",
			} {
				conn, err := net.Dial("tcp", srv.Listener.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				conn.SetDeadline(time.Now().Add(10 * time.Second))
				fmt.Fprintf(conn, "GET /open/x HTTP/1.1\r\nHost: x\r\n%s\r\n", hdr)
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				conn.Close()
				if err != nil {
					t.Fatalf("%q: %v", hdr, err)
				}
				if resp.StatusCode != http.StatusOK {
					t.Errorf("%q: %d, want 200", hdr, resp.StatusCode)
				}
			}
			if n := got.Load(); n != 0 {
				t.Errorf("the upstream got HTTP2-Settings %d times of 3", n)
			}
		})
	}
}
