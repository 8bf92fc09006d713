package ginlimit_test

import (
	"testing"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/middleware"
	"github.com/floodgate/floodgate/middleware/ginlimit"
)

// panicOf returns what f panicked with, nil if it returned.
func panicOf(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}

// ginlimit.New(nil) fails at once, naming the nil argument, as
// net/http's Handle does: before, it returned a handler that panicked
// with a nil dereference on the first request. So does a zero
// middleware.Middleware{}, with middleware's message. ForLimiter with a nil or
// unmade Limiter returns middleware.ForLimiter's error and no handler.
func TestNewNilMiddleware(t *testing.T) {
	const want = "ginlimit: New: nil *middleware.Middleware (check the error of middleware.New or middleware.ForLimiter)"
	if v := panicOf(func() { ginlimit.New(nil) }); v != want {
		t.Errorf("New(nil) panicked with %v, want %q", v, want)
	}
	const zero = "middleware: a zero Middleware{}, not made by New or ForLimiter, limits nothing: make it with one of them"
	if v := panicOf(func() { ginlimit.New(&middleware.Middleware{}) }); v != zero {
		t.Errorf("New(&middleware.Middleware{}) panicked with %v, want %q (at once, not at the first request)", v, zero)
	}
	for _, lim := range []*limiter.Limiter{nil, {}} {
		h, err := ginlimit.ForLimiter(lim, middleware.ClientIPKey())
		if h != nil || err == nil || err.Error() != "middleware: ForLimiter: nil Limiter, or not made by limiter.New" {
			t.Errorf("ForLimiter(%v): %v, %v, want no handler and middleware.ForLimiter's error", lim, h != nil, err)
		}
	}
}
