package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/middleware"
	"github.com/floodgate/floodgate/policy"
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

// A zero Middleware{} (not made by New or ForLimiter) has no Decider,
// domain nor Extractor: Handler refuses it at once, Check and
// CheckAdmitted at the call, all with one message saying what to do, and
// CheckConfig returns it as an error; Check, CheckAdmitted and
// CheckConfig on a nil *Middleware name the method, as Handler does.
// Before, Handler returned a handler that panicked at the first request
// (an interface conversion from the empty pool), Check and CheckAdmitted
// panicked so, and on a nil *Middleware with a nil dereference.
func TestZeroMiddleware(t *testing.T) {
	const zero = "middleware: a zero Middleware{}, not made by New or ForLimiter, limits nothing: make it with one of them"
	var nilMW *middleware.Middleware
	r := httptest.NewRequest("GET", "/", nil)
	for _, tc := range []struct {
		name string
		m    *middleware.Middleware
		want string
		f    func(m *middleware.Middleware)
	}{
		{"Handler", &middleware.Middleware{}, zero, func(m *middleware.Middleware) { m.Handler(http.HandlerFunc(ok)) }},
		{"Check", &middleware.Middleware{}, zero, func(m *middleware.Middleware) { m.Check(httptest.NewRecorder(), r) }},
		{"CheckAdmitted", &middleware.Middleware{}, zero, func(m *middleware.Middleware) { m.CheckAdmitted(httptest.NewRecorder(), r, nil) }},
		{"Check, nil", nilMW, "middleware: Check on a nil *Middleware (check the error of New or ForLimiter)",
			func(m *middleware.Middleware) { m.Check(httptest.NewRecorder(), r) }},
		{"CheckAdmitted, nil", nilMW, "middleware: CheckAdmitted on a nil *Middleware (check the error of New or ForLimiter)",
			func(m *middleware.Middleware) { m.CheckAdmitted(httptest.NewRecorder(), r, nil) }},
	} {
		if v := panicOf(func() { tc.f(tc.m) }); v != tc.want {
			t.Errorf("%s panicked with %v, want %q", tc.name, v, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		m    *middleware.Middleware
		want string
	}{
		{"zero", &middleware.Middleware{}, zero},
		{"nil", nilMW, "middleware: CheckConfig on a nil *Middleware (check the error of New or ForLimiter)"},
	} {
		var err error
		if v := panicOf(func() { err = tc.m.CheckConfig(&policy.Config{}) }); v != nil || err == nil || err.Error() != tc.want {
			t.Errorf("CheckConfig on a %s Middleware: %v (panic %v), want the error %q", tc.name, err, v, tc.want)
		}
	}
}
