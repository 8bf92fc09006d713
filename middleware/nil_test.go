package middleware_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"

	"github.com/floodgate/floodgate/middleware"
)

// panicOf returns what f panicked with, nil if it returned.
func panicOf(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}

// Handler on a nil *Middleware (an unchecked error of New or ForLimiter)
// or with a nil next handler fails at once, naming which, as net/http's
// Handle does: before, the handler it returned panicked with a nil
// dereference on the first request.
func TestHandlerNil(t *testing.T) {
	var nilMW *middleware.Middleware
	if v, want := panicOf(func() { nilMW.Handler(http.HandlerFunc(ok)) }),
		"middleware: Handler on a nil *Middleware (check the error of New or ForLimiter)"; v != want {
		t.Errorf("Handler on a nil Middleware panicked with %v, want %q", v, want)
	}
	lim := newLimiter(t, "api", algo.Params{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Minute}, newClock(t0))
	m, err := middleware.ForLimiter(lim, middleware.ClientIPKey())
	if err != nil {
		t.Fatal(err)
	}
	if v, want := panicOf(func() { m.Handler(nil) }), "middleware: Handler: nil next handler"; v != want {
		t.Errorf("Handler(nil) panicked with %v, want %q", v, want)
	}
}
