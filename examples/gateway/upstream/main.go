// Command upstream is the service behind the gateway example: it answers
// every request with its method and path, after the time of a "sleep"
// query parameter (e.g. ?sleep=2s, at most 1m) if there is one, so that
// requests can be kept in flight.
//
//	go run ./examples/gateway/upstream          # listens on 127.0.0.1:9000 (-addr to change)
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9000", "listen address")
	flag.Parse()
	// Listen first, so that the line below is printed only once the port
	// is ours (a port in use is the error instead).
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("upstream listening on %s", ln.Addr())
	srv := &http.Server{Handler: http.HandlerFunc(handle), ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.Serve(ln))
}

func handle(w http.ResponseWriter, r *http.Request) {
	if s := r.URL.Query().Get("sleep"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 || d > time.Minute {
			http.Error(w, "sleep: want a duration from 0 to 1m, such as 2s", http.StatusBadRequest)
			return
		}
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
	}
	fmt.Fprintf(w, "upstream: %s %s\n", r.Method, r.URL.RequestURI())
}
