package gateway_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/gateway"
)

// oneAnHour admits one request an hour on every path.
const oneAnHour = `
domain: edge
gateway:
  routes: [{descriptors: [{entries: [{source: generic_key, value: all}]}]}]
descriptors:
  - {key: generic_key, value: all, rate_limit: {name: hourly, unit: hour, requests_per_unit: 1}}
`

// blackhole is an upstream that never answers (its connect hangs).
type blackhole struct{}

func (blackhole) RoundTrip(r *http.Request) (*http.Response, error) {
	<-r.Context().Done()
	return nil, r.Context().Err()
}

// unsentBody sends request, which declares a body it never sends, to
// addr, and returns the status of the answer, how long it took, and how
// long until the gateway then closed the connection (0: it did not,
// within 10 s of the request).
func unsentBody(t *testing.T, addr, request string) (code int, answered, closed time.Duration) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	if _, err := io.WriteString(conn, request); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, time.Since(start), 0
	}
	answered = time.Since(start)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if _, err = br.ReadByte(); err == io.EOF {
		closed = time.Since(start)
	}
	return resp.StatusCode, answered, closed
}

// A client that declares a body and sends none, once its request is
// decided (429) or the upstream timed out (504), gets its answer within
// the client timeout and the connection is closed: net/http reads what is
// left of a body after the handler, before the answer, and did so with no
// deadline (a connection and a goroutine held as long as the client
// liked). With Expect: 100-continue the body is never asked for: the
// answer is at once (it never came: the server waited on a body the
// client waited on 100 Continue to send), and the connection closed
// within the client timeout.
func TestUnsentBodyAfterTheDecision(t *testing.T) {
	const margin = 2 * time.Second // -race on a loaded machine
	// servers returns the addresses of a gateway that refuses (its one
	// request an hour spent) and of one whose upstream never answers.
	servers := func(clientTimeout time.Duration) (limited, stalled string) {
		srv := front(t, engine(t, oneAnHour, newClock(t0)), echo(t).URL, gateway.WithClientTimeout(clientTimeout))
		if r := do(t, "GET", srv.URL+"/a", "Connection", "close"); r.status != 200 {
			t.Fatalf("first request: %d, want 200", r.status)
		}
		up := front(t, engine(t, timeoutConfig, nil), "http://upstream.invalid", gateway.WithTransport(blackhole{}),
			gateway.WithUpstreamTimeout(200*time.Millisecond), gateway.WithClientTimeout(clientTimeout))
		return srv.Listener.Addr().String(), up.Listener.Addr().String()
	}
	short, long := 500*time.Millisecond, 3*time.Second
	limited, stalled := servers(short)
	limitedLong, stalledLong := servers(long)
	for _, s := range []struct {
		name     string
		addr     string
		expect   bool
		code     int
		answered time.Duration // at most
		closed   time.Duration // at most
	}{
		{"refused, client timeout 500ms", limited, false, http.StatusTooManyRequests, short + margin, short + margin},
		{"upstream timeout, client timeout 500ms", stalled, false, http.StatusGatewayTimeout, 200*time.Millisecond + short + margin, 200*time.Millisecond + short + margin},
		// The answer at once: well within the client timeout.
		{"refused, Expect: 100-continue, client timeout 3s", limitedLong, true, http.StatusTooManyRequests, long / 2, long + margin},
		{"upstream timeout, Expect: 100-continue, client timeout 3s", stalledLong, true, http.StatusGatewayTimeout, long / 2, 200*time.Millisecond + long + margin},
	} {
		req := "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n"
		if s.expect {
			req += "Expect: 100-continue\r\n"
		}
		code, answered, closed := unsentBody(t, s.addr, req+"\r\n")
		if code != s.code || answered > s.answered || closed == 0 || closed > s.closed {
			t.Errorf("%s, Content-Length: 10 and no body: %d after %v, connection closed after %v (0: not in 10s); want %d within %v, closed within %v",
				s.name, code, answered.Round(time.Millisecond), closed.Round(time.Millisecond), s.code, s.answered, s.closed)
		}
	}
}

// Without a client timeout, the body left unread is still waited on for
// a bounded time only (nginx's lingering_timeout, 5 s).
func TestUnsentBodyWithoutClientTimeout(t *testing.T) {
	srv := front(t, engine(t, oneAnHour, newClock(t0)), echo(t).URL, gateway.WithClientTimeout(0))
	if r := do(t, "GET", srv.URL+"/a", "Connection", "close"); r.status != 200 {
		t.Fatalf("first request: %d, want 200", r.status)
	}
	code, answered, closed := unsentBody(t, strings.TrimPrefix(srv.URL, "http://"), "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n")
	if want := 5*time.Second + 2*time.Second; code != http.StatusTooManyRequests || answered > want || closed == 0 || closed > want {
		t.Errorf("no client timeout, Content-Length: 10 and no body: %d after %v, connection closed after %v (0: not in 10s); want 429 within %v, closed", code, answered.Round(time.Millisecond), closed.Round(time.Millisecond), want)
	}
}

// The bound on the read of a refused request's body is not left on the
// connection: a request that sent its body keeps the connection, and the
// next request on it, sent after the client timeout, is served.
func TestUnreadBodyBoundNotLeftOnTheConnection(t *testing.T) {
	srv := front(t, engine(t, oneAnHour, newClock(t0)), echo(t).URL, gateway.WithClientTimeout(300*time.Millisecond))
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	for i, want := range []int{200, 429, 429} {
		if i > 0 {
			time.Sleep(600 * time.Millisecond) // twice the client timeout
		}
		io.WriteString(conn, "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123456789")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d on the connection: %v", i+1, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || resp.Close {
			t.Errorf("request %d on the connection: %d, close %v; want %d, kept open", i+1, resp.StatusCode, resp.Close, want)
		}
	}
}
