package server_test

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/server"
)

// listen returns a loopback listener closed at the test's end.
func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// acceptAll accepts from l until it fails, sending each connection.
func acceptAll(l net.Listener) (<-chan net.Conn, <-chan error) {
	conns, errc := make(chan net.Conn, 16), make(chan error, 1)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				errc <- err
				return
			}
			conns <- c
		}
	}()
	return conns, errc
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func accepted(t *testing.T, conns <-chan net.Conn, what string) net.Conn {
	t.Helper()
	select {
	case c := <-conns:
		return c
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: not accepted within 5s", what)
		return nil
	}
}

// A listener bounded at 2 accepts two connections and holds the third
// back until one of the two closes; a connection closed twice gives
// its slot back once.
func TestConnListenerBounds(t *testing.T) {
	cl := server.LimitConns(listen(t), "http", 2, nil)
	conns, _ := acceptAll(cl)
	addr := cl.Addr().String()
	dial(t, addr)
	dial(t, addr)
	a := accepted(t, conns, "the first connection")
	accepted(t, conns, "the second connection")
	dial(t, addr)
	select {
	case <-conns:
		t.Fatal("a third connection was accepted while two were open, with a bound of 2")
	case <-time.After(200 * time.Millisecond): // the absence of an accept
	}
	if cl.Open() != 2 || cl.Full() != 1 || cl.Max() != 2 {
		t.Errorf("Open %d, Full %d, Max %d; want 2, 1, 2", cl.Open(), cl.Full(), cl.Max())
	}
	a.Close()
	a.Close() // a second Close frees nothing more
	accepted(t, conns, "the third connection, once the first closed")
	if cl.Open() != 2 {
		t.Errorf("Open %d after one of three closed, want 2", cl.Open())
	}
	dial(t, addr)
	select {
	case <-conns:
		t.Fatal("a fourth connection was accepted: a connection closed twice gave back two slots")
	case <-time.After(200 * time.Millisecond):
	}
}

// Without a bound the listener only counts.
func TestConnListenerCounts(t *testing.T) {
	cl := server.LimitConns(listen(t), "grpc", 0, nil)
	conns, _ := acceptAll(cl)
	for range 5 {
		dial(t, cl.Addr().String())
	}
	var got []net.Conn
	for i := range 5 {
		got = append(got, accepted(t, conns, "connection "+string(rune('1'+i))))
	}
	got[0].Close()
	if cl.Open() != 4 || cl.Full() != 0 || cl.Max() != 0 {
		t.Errorf("Open %d, Full %d, Max %d; want 4, 0, 0", cl.Open(), cl.Full(), cl.Max())
	}
}

// Closing a full listener ends the Accept that waits for room, with an
// error that is net.ErrClosed.
func TestConnListenerCloseEndsWait(t *testing.T) {
	cl := server.LimitConns(listen(t), "api", 1, nil)
	conns, errc := acceptAll(cl)
	dial(t, cl.Addr().String())
	accepted(t, conns, "the first connection")
	dial(t, cl.Addr().String())
	time.Sleep(50 * time.Millisecond) // let Accept wait for room
	cl.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept still waits 5s after Close")
	}
}

// get makes a GET with a client of its own (a connection of its own,
// kept alive afterwards) and returns the status and body.
func get(t *testing.T, url string) (*http.Client, int, string) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
	t.Cleanup(c.CloseIdleConnections)
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return c, resp.StatusCode, string(b)
}

// A full listener closes the keep-alive connection idle longest to make
// room for a new client, and never one serving a request: a client whose
// request is in flight keeps its connection while a newcomer waits.
func TestConnListenerClosesIdleFirst(t *testing.T) {
	release, entered := make(chan struct{}), make(chan struct{}, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			entered <- struct{}{}
			<-release
		}
		io.WriteString(w, "ok")
	})
	cl := server.LimitConns(listen(t), "http", 1, nil)
	srv := &http.Server{Handler: h, ConnState: cl.Track}
	go srv.Serve(cl)
	t.Cleanup(func() { srv.Close() })
	url := "http://" + cl.Addr().String()

	// An idle keep-alive connection gives way to a new client.
	get(t, url+"/a")
	if _, code, body := get(t, url+"/b"); code != 200 || body != "ok" {
		t.Fatalf("a second client, the first one's connection idle: %d %q, want 200 ok", code, body)
	}
	if cl.Reaped() != 1 || cl.Open() != 1 {
		t.Errorf("Reaped %d, Open %d; want 1 (the first client's idle connection), 1", cl.Reaped(), cl.Open())
	}

	// A connection serving a request is not closed: the newcomer waits
	// until the request is over and its connection idle.
	held := make(chan string, 1)
	go func() {
		_, code, body := get(t, url+"/hold")
		held <- strings.Join([]string{http.StatusText(code), body}, " ")
	}()
	<-entered
	late := make(chan int, 1)
	go func() {
		_, code, _ := get(t, url+"/c")
		late <- code
	}()
	select {
	case code := <-late:
		t.Fatalf("a newcomer was answered (%d) while the only connection served a request", code)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	if got := <-held; got != "OK ok" {
		t.Fatalf("the request in flight: %q, want OK ok (its connection was closed under it)", got)
	}
	select {
	case code := <-late:
		if code != 200 {
			t.Fatalf("the newcomer: %d, want 200", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the newcomer still waits 5s after the request in flight ended")
	}
}

// Through Serve: --max-connections 1 on the HTTP address lets client
// after client in (each closing the previous idle one), the metrics say
// so, and the full listener is a WARN event.
func TestServeLimitConns(t *testing.T) {
	srv := serverFor(t, releaseConfig)
	ls, err := server.Listen("127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ls = srv.LimitConns(ls, 1)
	serve(t, srv, ls)
	for i := range 3 {
		if _, code, _ := get(t, "http://"+ls.HTTP.Addr().String()+"/healthcheck"); code != 200 {
			t.Fatalf("client %d: /healthcheck %d, want 200", i+1, code)
		}
	}
	_, _, body := get(t, "http://"+ls.Admin.Addr().String()+"/metrics")
	for _, want := range []string{
		`floodgate_connections_max{listener="http"} 1`,
		`floodgate_connections_open{listener="http"} 1`,
		`floodgate_connections_full_total{listener="http"} 2`,
		`floodgate_connections_idle_closed_total{listener="http"} 2`,
		`floodgate_connections_max{listener="grpc"} 1`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	var warned int
	for _, e := range srv.Events() {
		if e.Kind == "connections" && e.Level == "WARN" && strings.Contains(e.Message, "listener http holds 1 connections") {
			warned++
		}
	}
	if warned != 1 {
		t.Errorf("%d WARN events of the full listener, want 1 (at most one a minute): %+v", warned, srv.Events())
	}
}

// getOn makes a GET with c and reads the answer whole.
func getOn(c *http.Client, url string) error {
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

// A newcomer at a full listener with two idle keep-alive connections
// closes exactly one of them (half the newcomers closed two: a token of
// a connection turned idle won over the slot the first close freed).
func TestConnListenerClosesOneIdlePerNewcomer(t *testing.T) {
	cl := server.LimitConns(listen(t), "http", 2, nil)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }), ConnState: cl.Track}
	go srv.Serve(cl)
	t.Cleanup(func() { srv.Close() })
	url := "http://" + cl.Addr().String() + "/"
	for round := range 10 {
		var cs []*http.Client
		for range 3 {
			cs = append(cs, &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second})
		}
		for _, c := range cs[:2] {
			if err := getOn(c, url); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(30 * time.Millisecond) // both idle (ConnState runs after the response)
		before := cl.Reaped()
		if err := getOn(cs[2], url); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Millisecond)
		if d := cl.Reaped() - before; d != 1 {
			t.Fatalf("round %d: a newcomer closed %d idle connections, want 1", round, d)
		}
		for _, c := range cs {
			c.CloseIdleConnections()
		}
		for i := 0; cl.Open() != 0 && i < 200; i++ {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// A keep-alive connection whose next request is under way (its header in
// part sent) is not closed to make room: net/http calls it active only
// once the whole header is in (it was closed, the request lost).
func TestConnListenerKeepsARequestUnderWay(t *testing.T) {
	cl := server.LimitConns(listen(t), "http", 1, nil)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }), ConnState: cl.Track}
	go srv.Serve(cl)
	t.Cleanup(func() { srv.Close() })
	a := dial(t, cl.Addr().String())
	br := bufio.NewReader(a)
	ask := func(req string) (*http.Response, error) {
		if _, err := io.WriteString(a, req); err != nil {
			return nil, err
		}
		a.SetReadDeadline(time.Now().Add(5 * time.Second))
		return http.ReadResponse(br, nil)
	}
	if resp, err := ask("GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("A's first request: %v %v", resp, err)
	} else {
		io.Copy(io.Discard, resp.Body)
	}
	time.Sleep(30 * time.Millisecond) // idle
	io.WriteString(a, "GET / HTTP/1.1\r\nHost: x\r\n")
	time.Sleep(30 * time.Millisecond) // part of a header in
	late := make(chan error, 1)
	go func() {
		late <- getOn(&http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}, "http://"+cl.Addr().String()+"/")
	}()
	time.Sleep(100 * time.Millisecond) // the newcomer waits at the full listener
	resp, err := ask("\r\n")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("A's second request, under way when a newcomer came: %v %v (its connection was closed under it)", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	if err := <-late; err != nil {
		t.Fatalf("the newcomer, once A's connection turned idle again: %v", err)
	}
	if cl.Reaped() != 1 {
		t.Errorf("Reaped %d, want 1 (A's connection, idle after its second request)", cl.Reaped())
	}
}

// A client that stops reading its response holds its connection only
// until a write makes no progress for the write stall, then the
// connection closes and its slot is free (it held it for ever: net/http
// here sets no WriteTimeout, and a full listener closes only idle ones).
func TestConnListenerWriteStall(t *testing.T) {
	cl := server.LimitConns(listen(t), "api", 1, nil)
	cl.SetWriteStall(200 * time.Millisecond)
	big := strings.Repeat("x", 64<<20) // more than the socket buffers hold
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, big) }), ConnState: cl.Track}
	go srv.Serve(cl)
	t.Cleanup(func() { srv.Close() })
	staller := dial(t, cl.Addr().String())
	io.WriteString(staller, "GET / HTTP/1.1\r\nHost: x\r\n\r\n") // and never read
	deadline := time.Now().Add(10 * time.Second)
	for cl.Open() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("a client that stopped reading still holds its slot 10s later (Open %d); the write stall is 200ms", cl.Open())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := getOn(&http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}, "http://"+cl.Addr().String()+"/"); err != nil {
		t.Fatalf("a newcomer after the staller's slot was freed: %v", err)
	}
}

// An idle HTTP/2 connection (h2c, and h2 over TLS) is closed to make room
// although its client sent frames after its last response (window updates
// for a large one): they are no request (it was spared, and the newcomer
// waited).
func TestConnListenerClosesIdleH2(t *testing.T) {
	for _, overTLS := range []bool{false, true} {
		cl := server.LimitConns(listen(t), "http", 1, nil)
		protocols := new(http.Protocols)
		protocols.SetHTTP1(true)
		protocols.SetHTTP2(true)
		protocols.SetUnencryptedHTTP2(true)
		body := strings.Repeat("x", 256<<10) // beyond the flow window: the client updates it
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) }),
			ConnState: cl.Track, Protocols: protocols}
		var ln net.Listener = cl
		scheme := "http://"
		if overTLS {
			cfg := selfSigned(t)
			cfg.NextProtos = []string{"h2", "http/1.1"}
			ln, scheme = tls.NewListener(cl, cfg), "https://"
		}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		client := func() *http.Client {
			p := new(http.Protocols)
			p.SetUnencryptedHTTP2(!overTLS)
			p.SetHTTP2(overTLS)
			c := &http.Client{Transport: &http.Transport{Protocols: p, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
				Timeout: 5 * time.Second}
			t.Cleanup(c.CloseIdleConnections)
			return c
		}
		url := scheme + cl.Addr().String() + "/"
		if err := getOn(client(), url); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // idle, its window updates read
		start := time.Now()
		if err := getOn(client(), url); err != nil {
			t.Fatalf("TLS %v: a newcomer with the one slot held by an idle HTTP/2 connection: %v", overTLS, err)
		}
		if took := time.Since(start); took > 2*time.Second || cl.Reaped() != 1 {
			t.Fatalf("TLS %v: the newcomer took %v, Reaped %d: want the idle HTTP/2 connection closed at once", overTLS, took, cl.Reaped())
		}
	}
}

// The write stall bounds a write that makes no progress, not a long one:
// a client that reads a large response slowly, but steadily, gets it all
// (one Write of the whole body had one stall to finish in).
func TestConnListenerWriteStallLetsSlowReadersFinish(t *testing.T) {
	cl := server.LimitConns(listen(t), "api", 1, nil)
	cl.SetWriteStall(300 * time.Millisecond)
	const size = 4 << 20
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		io.WriteString(w, strings.Repeat("x", size)) // one Write
	})}
	go srv.Serve(cl)
	t.Cleanup(func() { srv.Close() })
	c := dial(t, cl.Addr().String())
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetReadBuffer(64 << 10)
	}
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 128<<10)
	got := 0
	for {
		n, err := resp.Body.Read(buf)
		got += n
		if err != nil {
			break
		}
		time.Sleep(20 * time.Millisecond) // about 6 MB/s at most: the Write outlives a stall
	}
	if got != size {
		t.Fatalf("a slow but steady reader got %d of %d bytes: cut by the write stall", got, size)
	}
}

// A write deadline the connection's user sets (crypto/tls gives its
// close_notify 5 s) is kept under the write stall, not pushed back to it.
func TestConnListenerWriteStallKeepsTheUsersDeadline(t *testing.T) {
	cl := server.LimitConns(listen(t), "api", 1, nil)
	cl.SetWriteStall(time.Minute)
	conns, _ := acceptAll(cl)
	dial(t, cl.Addr().String()) // and never read
	c := accepted(t, conns, "the connection")
	defer c.Close()
	c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
	start := time.Now()
	_, err := c.Write(make([]byte, 64<<20)) // more than the socket buffers hold
	if took := time.Since(start); !errors.Is(err, os.ErrDeadlineExceeded) || took > 5*time.Second {
		t.Fatalf("a write past the user's 200ms deadline under a 1m stall: %v after %v, want the deadline's error at about 200ms", err, took)
	}
}
