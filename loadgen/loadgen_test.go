package loadgen_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/loadgen"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/server"
	"github.com/floodgate/floodgate/store/memory"
)

const cfgYAML = `
domain: bench
descriptors:
  - key: client
    # A sliding log: no window boundary can fall inside the test.
    rate_limit: {name: hourly, algorithm: sliding_log, unit: hour, requests_per_unit: 1000}
  - key: open
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: free
    rate_limit: {unlimited: true}
  - key: half
    value: "1"
    rate_limit: {unit: second, requests_per_unit: 1000000000}
`

func startServer(t *testing.T) (httpAddr, grpcAddr string) {
	t.Helper()
	cfg, err := policy.Parse("bench.yaml", []byte(cfgYAML))
	if err != nil {
		t.Fatal(err)
	}
	st, _ := memory.New()
	eng, _ := policy.NewEngine(cfg, st)
	srv, err := server.New(eng, st)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := server.Listen("127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ls) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		st.Close()
	})
	return ls.HTTP.Addr().String(), ls.GRPC.Addr().String()
}

// TestExactOverEveryProtocol: 4 connections × 2 callers send 1200
// single-hit requests at a 1000-per-hour descriptor: exactly 1000 admitted.
func TestExactOverEveryProtocol(t *testing.T) {
	httpAddr, grpcAddr := startServer(t)
	for _, p := range []string{loadgen.GRPC, loadgen.JSON, loadgen.V1} {
		addr := httpAddr
		if p == loadgen.GRPC {
			addr = grpcAddr
		}
		var progress bytes.Buffer
		res, err := loadgen.Run(context.Background(), loadgen.Config{
			Protocol: p, Addr: addr, Domain: "bench",
			Descriptors: [][]loadgen.Entry{{{Key: "client", Value: "exact-" + p}}},
			Requests:    1200, Duration: time.Minute, Concurrency: 8, Connections: 4, Progress: &progress,
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.Admitted != 1000 || res.Rejected != 200 || res.Errors != 0 {
			t.Fatalf("%s: admitted %d rejected %d errors %d %v, want exactly 1000 and 200", p, res.Admitted, res.Rejected, res.Errors, res.FirstErrors)
		}
		var out bytes.Buffer
		res.Print(&out)
		for _, want := range []string{"admitted    1000 (83.3%)", "rejected    200 (16.7%)", "decisions/s", "p99", "histogram"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s report lacks %q:\n%s", p, want, out.String())
			}
		}
		if !strings.Contains(progress.String(), "100%") {
			t.Errorf("%s progress bar never reached 100%%: %q", p, progress.String())
		}
	}
}

// TestUnmatchedNote: a run whose descriptors no rule matches is all
// admitted, and the report says why; an unlimited rule, a limited one and
// a mix are not mistaken for it.
func TestUnmatchedNote(t *testing.T) {
	httpAddr, grpcAddr := startServer(t)
	const note = `note: no rule matched the descriptors sent; every request was admitted without a limit (domain "bench", descriptor nosuch=x)`
	for _, p := range []string{loadgen.GRPC, loadgen.JSON, loadgen.V1} {
		addr := httpAddr
		if p == loadgen.GRPC {
			addr = grpcAddr
		}
		for _, c := range []struct {
			desc      string
			keys      int
			unmatched int64
			want      string
		}{
			{"nosuch=x", 1, 20, note},
			{"free=x", 1, 0, ""},
			{"open=" + p, 1, 0, ""},
			// Key index 1 matches the half rule, 0 nothing: 10 and 10.
			{"half={i}", 2, 10, `note: 10 of 20 answered requests (50.0%) matched no rule and were admitted without a limit (domain "bench", descriptor half={i})`},
		} {
			d, err := loadgen.ParseDescriptor(c.desc)
			if err != nil {
				t.Fatal(err)
			}
			cfg := loadgen.Config{Protocol: p, Addr: addr, Domain: "bench", Descriptors: [][]loadgen.Entry{d}, Keys: c.keys, Requests: 20, Concurrency: 2}
			res, err := loadgen.Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if res.Admitted != 20 || res.Unmatched != c.unmatched {
				t.Errorf("%s %s: admitted %d unmatched %d (errors %v), want 20 and %d", p, c.desc, res.Admitted, res.Unmatched, res.FirstErrors, c.unmatched)
			}
			var out bytes.Buffer
			res.Print(&out)
			if got := strings.Contains(out.String(), "note:"); got != (c.want != "") || c.want != "" && !strings.Contains(out.String(), c.want) {
				t.Errorf("%s %s: report\n%s\nwant note %q", p, c.desc, out.String(), c.want)
			}
		}
	}
}

func TestBoundedByDuration(t *testing.T) {
	_, grpcAddr := startServer(t)
	res, err := loadgen.Run(context.Background(), loadgen.Config{Addr: grpcAddr, Domain: "bench",
		Descriptors: [][]loadgen.Entry{{{Key: "open", Value: "{i}"}}}, Keys: 100, Duration: 300 * time.Millisecond, Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	if res.Elapsed > 2*time.Second || res.Admitted == 0 || res.Errors != 0 {
		t.Fatalf("a 300ms run took %v with %d admitted and %d errors %v", res.Elapsed, res.Admitted, res.Errors, res.FirstErrors)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []loadgen.Config{
		{Addr: "x"}, // unbounded
		{Addr: "x", Requests: 1, Protocol: "carrier"}, // unknown protocol
		{Requests: 1}, // no address
	} {
		if _, err := loadgen.Run(context.Background(), c); err == nil {
			t.Errorf("Run(%+v) succeeded", c)
		}
	}
	// A negative is an error, never taken for the default its zero means.
	for _, c := range []struct {
		cfg  loadgen.Config
		want string
	}{
		{loadgen.Config{Addr: "x", Requests: 1, Keys: -3}, "loadgen: keys -3 must not be negative"},
		{loadgen.Config{Addr: "x", Requests: 1, Hits: -1}, "loadgen: hits -1 must not be negative"},
		{loadgen.Config{Addr: "x", Requests: 1, Concurrency: -5}, "loadgen: concurrency -5 must not be negative"},
		{loadgen.Config{Addr: "x", Requests: 1, Connections: -2}, "loadgen: connections -2 must not be negative"},
		{loadgen.Config{Addr: "x", Requests: 1, Timeout: -time.Second}, "loadgen: timeout -1s must not be negative"},
		{loadgen.Config{Addr: "x", Duration: -time.Second}, "loadgen: duration -1s must not be negative"},
		{loadgen.Config{Addr: "x", Requests: 1, Hits: 1 << 32}, "loadgen: hits 4294967296 is over 4294967295"},
		{loadgen.Config{Addr: "x", Requests: 1, Concurrency: 2, Connections: 3}, "loadgen: 3 connections for 2 callers: at most one a caller"},
		{loadgen.Config{Addr: "x", Requests: 1, Connections: 17}, "loadgen: 17 connections for 16 callers: at most one a caller"},
	} {
		if _, err := loadgen.Run(context.Background(), c.cfg); err == nil || err.Error() != c.want {
			t.Errorf("Run(%+v) = %v, want %q", c.cfg, err, c.want)
		}
	}
	for in, want := range map[string]string{
		"a=1,,b=2": `entry "" is not key=value`,
		"a=1,=2":   `entry "=2" has an empty key`,
		"noequals": `entry "noequals" is not key=value`,
		"":         `entry "" is not key=value`,
	} {
		if _, err := loadgen.ParseDescriptor(in); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("ParseDescriptor(%q) = %v, want %q", in, err, want)
		}
	}
	if d, err := loadgen.ParseDescriptor("k=,j=v"); err != nil || len(d) != 2 || d[0] != (loadgen.Entry{Key: "k"}) {
		t.Errorf("ParseDescriptor(%q) = %v, %v; an empty value is allowed", "k=,j=v", d, err)
	}
	d, err := loadgen.ParseDescriptor("user={i},path=/x=y")
	if err != nil || len(d) != 2 || d[1].Value != "/x=y" {
		t.Errorf("ParseDescriptor = %v, %v", d, err)
	}
}

func TestServerDownIsAnError(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	res, err := loadgen.Run(context.Background(), loadgen.Config{Protocol: loadgen.JSON, Addr: addr, Requests: 5, Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 5 || len(res.FirstErrors) == 0 {
		t.Fatalf("errors %d %v, want 5", res.Errors, res.FirstErrors)
	}
}

func TestHistogram(t *testing.T) {
	var h loadgen.Histogram
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	for q, want := range map[float64]time.Duration{0.5: 500 * time.Microsecond, 0.99: 990 * time.Microsecond, 1: 1000 * time.Microsecond} {
		got := h.Quantile(q)
		if d := got - want; d < -want/50 || d > want/50 {
			t.Errorf("Quantile(%v) = %v, want %v within 2%%", q, got, want)
		}
	}
	if h.Min() != time.Microsecond || h.Max() != time.Millisecond || h.Count() != 1000 {
		t.Errorf("min %v max %v count %d", h.Min(), h.Max(), h.Count())
	}
	var total uint64
	for _, b := range h.Bars() {
		total += b.Count
	}
	if total != 1000 {
		t.Errorf("bars hold %d samples, want 1000", total)
	}
}

// TestHTTPProtocol: plain requests to a URL; 2xx and 3xx admitted
// (redirects not followed), the refused statuses rejected, any other an
// error; {i} in the URL and the headers is the key index.
func TestHTTPProtocol(t *testing.T) {
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		if r.Host != "edge.test" || r.Header.Get("X-Key") != "k"+r.URL.Query().Get("k") {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		switch r.URL.Path {
		case "/limited":
			w.Header().Set("RateLimit-Policy", `"p";q=1;w=1`)
			io.WriteString(w, "ok")
		case "/moved":
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	hdr := http.Header{"X-Key": {"k{i}"}, "Host": {"edge.test"}}
	for _, c := range []struct {
		path                     string
		refused                  []int
		ok, rej, errs, unmatched int64
		status                   int
	}{
		{"/limited?k={i}", nil, 12, 0, 0, 0, 200},
		{"/moved?k={i}", nil, 12, 0, 0, 12, 302},
		{"/down?k={i}", nil, 0, 0, 12, 0, 503},
		{"/down?k={i}", []int{429, 503}, 0, 12, 0, 0, 503},
	} {
		served.Store(0)
		res, err := loadgen.Run(context.Background(), loadgen.Config{Protocol: loadgen.HTTP, Addr: srv.URL + c.path, Header: hdr,
			RefusedStatus: c.refused, Keys: 3, Requests: 12, Concurrency: 4, Connections: 2})
		if err != nil {
			t.Fatal(err)
		}
		if res.Admitted != c.ok || res.Rejected != c.rej || res.Errors != c.errs || res.Unmatched != c.unmatched ||
			res.Statuses[c.status] != 12 || served.Load() != 12 || res.Dials < 1 || res.Dials > 4 {
			t.Errorf("%s refused %v: admitted %d rejected %d errors %d unmatched %d statuses %v served %d dials %d %v",
				c.path, c.refused, res.Admitted, res.Rejected, res.Errors, res.Unmatched, res.Statuses, served.Load(), res.Dials, res.FirstErrors)
		}
	}
	for _, c := range []struct {
		cfg  loadgen.Config
		want string
	}{
		{loadgen.Config{Protocol: loadgen.JSON, Addr: "x", Requests: 1, Method: "PUT"}, "loadgen: method, header, body and refused statuses are for the http protocol, not json"},
		{loadgen.Config{Protocol: loadgen.HTTP, Addr: "x", Requests: 1, RefusedStatus: []int{200}}, "loadgen: refused status 200: want 400 to 599"},
		{loadgen.Config{Protocol: loadgen.HTTP, Addr: "x", Requests: 1, Method: "GE T"}, `loadgen: method "GE T": net/http: invalid method "GE T"`},
	} {
		if _, err := loadgen.Run(context.Background(), c.cfg); err == nil || err.Error() != c.want {
			t.Errorf("Run(%+v) = %v, want %q", c.cfg, err, c.want)
		}
	}
}

// connCounter is an httptest server answering every protocol's request
// as admitted (after a millisecond, so that callers overlap), counting
// the connections it accepted.
func connCounter(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		time.Sleep(time.Millisecond)
		switch r.URL.Path {
		case "/json":
			io.WriteString(w, `{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":1,"unit":"SECOND"}}]}`)
		case "/v1/decide":
			io.WriteString(w, `{"allowed":true,"statuses":[{"matched":true}]}`)
		default:
			w.Header().Set("RateLimit-Policy", `"p";q=1;w=1`)
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

// TestConnectionsExact: c callers share exactly the connections asked
// for, over json, v1 and http alike, and the report's two counts agree;
// 0 is one a caller, HTTP/1.1 carrying one request at a time.
func TestConnectionsExact(t *testing.T) {
	srv, conns := connCounter(t)
	for _, p := range []string{loadgen.JSON, loadgen.V1, loadgen.HTTP} {
		for _, c := range []struct{ callers, conns int }{{64, 1}, {10, 4}, {8, 8}, {16, 0}} {
			want := int64(c.conns)
			if want == 0 {
				want = 16 // one a caller: HTTP/1.1 carries one request at a time
			}
			var res *loadgen.Result
			// net/http gives a keep-alive connection up when its request's
			// write is not confirmed within 50 ms of the answer
			// (maxWriteWaitBeforeConnReuse), which a loaded machine can
			// make happen; the report then rightly counts a connection
			// more. A case is run again, at most twice, when it opened
			// more than it should: a bug that opens more every time still
			// fails, and the report must agree with the server each time.
			for try := 0; ; try++ {
				conns.Store(0)
				var err error
				res, err = loadgen.Run(context.Background(), loadgen.Config{Protocol: p, Addr: srv.URL,
					Requests: 300, Duration: time.Minute, Concurrency: c.callers, Connections: c.conns})
				if err != nil {
					t.Fatal(err)
				}
				if conns.Load() != res.Dials {
					t.Errorf("%s -c %d -conns %d: the server saw %d connections, the result says %d opened",
						p, c.callers, c.conns, conns.Load(), res.Dials)
				}
				if res.Dials <= want || try == 2 {
					break
				}
				t.Logf("%s -c %d -conns %d: %d connections opened, want %d; running the case again", p, c.callers, c.conns, res.Dials, want)
			}
			if res.Admitted != 300 || res.Errors != 0 || conns.Load() != want || res.Dials != want {
				t.Errorf("%s -c %d -conns %d: admitted %d errors %d %v; the server saw %d connections, the result says %d opened; want %d",
					p, c.callers, c.conns, res.Admitted, res.Errors, res.FirstErrors, conns.Load(), res.Dials, want)
			}
			var out bytes.Buffer
			res.Print(&out)
			for _, w := range []string{fmt.Sprintf("%d callers over %d connection(s)\n", c.callers, want), fmt.Sprintf("connections %d opened\n", want)} {
				if !strings.Contains(out.String(), w) {
					t.Errorf("%s -c %d -conns %d: report lacks %q:\n%s", p, c.callers, c.conns, w, out.String())
				}
			}
		}
	}
}

// TestFailedDialsNotOpened: with nothing listening no connection was
// opened; the attempts are reported as failed, not opened.
func TestFailedDialsNotOpened(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	res, err := loadgen.Run(context.Background(), loadgen.Config{Protocol: loadgen.JSON, Addr: addr, Requests: 5, Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	res.Print(&out)
	if res.Dials != 0 || !strings.Contains(out.String(), "connections 0 opened, 5 attempt(s) failed to connect\n") {
		t.Errorf("dials %d, report:\n%s\nwant none opened and 5 failed", res.Dials, out.String())
	}
}

// TestKeysNeedIndex: more than one key with {i} nowhere it is replaced is
// an error, not a run that uses one key while its report says N.
func TestKeysNeedIndex(t *testing.T) {
	one := [][]loadgen.Entry{{{Key: "user", Value: "x"}}}
	for _, c := range []struct {
		cfg  loadgen.Config
		want string
	}{
		{loadgen.Config{Addr: "x", Requests: 1, Keys: 100}, "loadgen: 100 keys but no descriptor value has {i}: every request would use the same key"},
		{loadgen.Config{Addr: "x", Requests: 1, Keys: 2, Descriptors: one}, "loadgen: 2 keys but no descriptor value has {i}: every request would use the same key"},
		{loadgen.Config{Protocol: loadgen.HTTP, Addr: "http://x/a", Requests: 1, Keys: 3, Header: http.Header{"X": {"k"}}},
			"loadgen: 3 keys but neither the address nor a header value has {i}: every request would use the same key"},
	} {
		if _, err := loadgen.Run(context.Background(), c.cfg); err == nil || err.Error() != c.want {
			t.Errorf("Run(%+v) = %v, want %q", c.cfg, err, c.want)
		}
	}
}

// TestEndedSaysWhichBound: the report says whether the count, the time
// bound or the caller's context ended the run, and how far it had come.
func TestEndedSaysWhichBound(t *testing.T) {
	srv, _ := connCounter(t)
	for _, c := range []struct {
		interrupt bool // cancel Run's context after 200ms
		requests  int64
		duration  time.Duration
		want      *regexp.Regexp
	}{
		{false, 50, time.Minute, regexp.MustCompile(`\nended       all 50 requests done\n`)},
		{false, 1e9, 200 * time.Millisecond, regexp.MustCompile(`\nended       time bound 200ms reached: [1-9]\d* of 1000000000 requests done\n`)},
		{false, 0, 200 * time.Millisecond, regexp.MustCompile(`\nended       time bound 200ms reached\n`)},
		{true, 1e9, time.Minute, regexp.MustCompile(`\nended       interrupted after 0\.\d\ds: [1-9]\d* of 1000000000 requests done\n`)},
		{true, 0, time.Minute, regexp.MustCompile(`\nended       interrupted after 0\.\d\ds of 1m0s\n`)},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		if c.interrupt {
			time.AfterFunc(200*time.Millisecond, cancel)
		}
		res, err := loadgen.Run(ctx, loadgen.Config{Protocol: loadgen.JSON, Addr: srv.URL, Requests: c.requests, Duration: c.duration, Concurrency: 2})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		res.Print(&out)
		if !c.want.MatchString(out.String()) {
			t.Errorf("-n %d -d %v: report\n%s\nwant %s", c.requests, c.duration, out.String(), c.want)
		}
	}
}

// TestProgressRateIsAnswers: the progress bar's rate is of answers, as
// the report's; errors are counted apart. Its frame shows both bounds.
func TestProgressRateIsAnswers(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	var progress bytes.Buffer
	res, err := loadgen.Run(context.Background(), loadgen.Config{Protocol: loadgen.JSON, Addr: srv.URL, Requests: 40, Duration: time.Minute,
		Concurrency: 2, Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	frames := strings.Split(strings.TrimSuffix(progress.String(), "\n"), "\r")
	last := frames[len(frames)-1]
	if res.Errors != 40 || !regexp.MustCompile(`\] 100% 40/40 req \d+\.\ds/1m0s 0 decisions/s ok 0 over 0 err 40 *$`).MatchString(last) {
		t.Errorf("errors %d, last frame %q; want 0 decisions/s and 40 errors apart", res.Errors, last)
	}
}

// TestProbe: one connection opened and closed, nothing sent; an address
// where nothing listens is "cannot reach".
func TestProbe(t *testing.T) {
	srv, conns := connCounter(t)
	_, grpcAddr := startServer(t)
	for _, cfg := range []loadgen.Config{
		{Protocol: loadgen.JSON, Addr: srv.URL, Requests: 1},
		{Protocol: loadgen.V1, Addr: srv.Listener.Addr().String(), Requests: 1},
		{Protocol: loadgen.HTTP, Addr: srv.URL + "/x/{i}?k={i}", Keys: 2, Requests: 1},
		{Protocol: loadgen.GRPC, Addr: grpcAddr, Requests: 1},
	} {
		if err := loadgen.Probe(context.Background(), cfg); err != nil {
			t.Errorf("Probe(%s %s) = %v", cfg.Protocol, cfg.Addr, err)
		}
	}
	// The server counts a connection when its accept loop gets to it,
	// which can come after Probe has closed it: wait for the third (2 s
	// at most), then for any fourth a little longer.
	for i := 0; conns.Load() < 3 && i < 200; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	if conns.Load() != 3 {
		t.Errorf("the server saw %d connections, want 3 (one a probe)", conns.Load())
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	if err := loadgen.Probe(context.Background(), loadgen.Config{Protocol: loadgen.JSON, Addr: "http://" + addr, Requests: 1}); err == nil ||
		!strings.HasPrefix(err.Error(), "cannot reach "+addr+": dial tcp "+addr+": connect: connection refused") {
		t.Errorf("Probe of a closed port = %v", err)
	}
	if err := loadgen.Probe(context.Background(), loadgen.Config{Addr: "x"}); err == nil || err.Error() != "loadgen: set a request count, a duration or both: a run must be bounded" {
		t.Errorf("Probe of a Config Run refuses = %v", err)
	}
}
