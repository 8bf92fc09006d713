// Command httpservice is a small HTTP service limited by Floodgate's
// middleware, to see the rate limit header fields with curl:
//
//	go run ./examples/httpservice
//	curl -i http://127.0.0.1:8000/hello
//
// See README.md beside this file for what each endpoint shows.
package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/floodgate/floodgate/dimension"
	"github.com/floodgate/floodgate/middleware"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memory"
)

//go:embed rules.yaml
var rules []byte

func main() {
	addr := flag.String("addr", "127.0.0.1:8000", "listen address")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *addr); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, addr string) error {
	h, closeStore, err := newHandler(nil)
	if err != nil {
		return err
	}
	defer closeStore()
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	// Listen first, so that the line below is printed only once the port
	// is ours (a port in use is the error instead).
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	log.Printf("httpservice listening on http://%s (try: curl -i http://%s/hello)", ln.Addr(), ln.Addr())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// newHandler builds the service: the rules on an in-memory store, one
// middleware per kind of limit, and the endpoints. clock is the time the
// store and the engine read; nil is the real clock (the store's own, which
// a step of the system's clock does not move). The test passes one that
// stands still.
func newHandler(clock func() time.Time) (http.Handler, func(), error) {
	cfg, err := policy.Parse("rules.yaml", rules)
	if err != nil {
		return nil, nil, err
	}
	var storeOpts []memory.Option
	var engineOpts []policy.Option
	if clock != nil {
		storeOpts = append(storeOpts, memory.WithClock(clock))
		engineOpts = append(engineOpts, policy.WithClock(clock))
	}
	st, err := memory.New(storeOpts...)
	if err != nil {
		return nil, nil, err
	}
	engine, err := policy.NewEngine(cfg, st, engineOpts...)
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	// Degraded requests are served by a cached copy. Every middleware of
	// the domain knows the fallbacks: New checks that each degrade rule
	// of the domain has its own, and that each descriptor of the spec
	// reaches a rule (a misspelt key would limit nothing).
	cached := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Report", "cached")
		fmt.Fprintln(w, "report (cached copy: the live one is over its limit)")
	})
	var buildErr error
	limit := func(spec dimension.Spec) func(http.Handler) http.Handler {
		x, err := dimension.NewExtractor(spec)
		var m *middleware.Middleware
		if err == nil {
			m, err = middleware.New(engine, "httpservice", x, middleware.WithFallback("cached-report", cached))
		}
		if err != nil {
			buildErr = errors.Join(buildErr, err)
			return func(h http.Handler) http.Handler { return h }
		}
		return m.Handler
	}
	entries := func(es ...dimension.EntrySpec) dimension.Spec {
		return dimension.Spec{Descriptors: []dimension.DescriptorSpec{{Entries: es}}}
	}
	route := func(name string) dimension.EntrySpec {
		return dimension.EntrySpec{Source: "generic_key", Key: "route", Value: name}
	}

	mux := http.NewServeMux()
	mux.Handle("GET /hello", limit(entries(dimension.EntrySpec{Source: "remote_address"}))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })))
	mux.Handle("/api/", limit(entries(dimension.EntrySpec{Source: "api_key", Default: "anonymous"}))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "api:", r.URL.Path) })))
	mux.Handle("GET /search", limit(entries(route("search")))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintln(w, "results at", time.Now().Format("15:04:05.000"))
		})))
	mux.Handle("GET /report", limit(entries(route("report")))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "report (live)") })))
	mux.Handle("GET /slow", limit(entries(route("slow"), dimension.EntrySpec{Source: "remote_address"}))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-time.After(5 * time.Second):
				fmt.Fprintln(w, "slow done")
			case <-r.Context().Done():
			}
		})))
	if buildErr != nil {
		st.Close()
		return nil, nil, buildErr
	}
	return mux, func() { st.Close() }, nil
}
