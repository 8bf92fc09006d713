package resilient

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate/floodgate/store"
)

// TestBreakerSteps walks the breaker through a table of outcomes at named
// instants with an injected clock.
func TestBreakerSteps(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	var changes, trips []string
	b := &breaker{limit: 3, cooldown: time.Second, now: func() time.Time { return now },
		onChange: func(from, to BreakerState) { changes = append(changes, from.String()+">"+to.String()) },
		onTrip:   func(err *CircuitOpenError) { trips = append(trips, fmt.Sprintf("%v reopened=%v", err, err.Reopened)) }}
	type step struct {
		at        time.Duration
		result    string // "ok", "fail" or "" (only ask allow)
		wantAllow bool
		wantProbe bool
		wantState BreakerState
	}
	steps := []step{
		{0, "fail", true, false, Closed},
		{0, "fail", true, false, Closed},
		{0, "ok", true, false, Closed}, // a success resets the count
		{0, "fail", true, false, Closed},
		{0, "fail", true, false, Closed},
		{0, "fail", true, false, Open}, // third consecutive failure
		{500 * time.Millisecond, "", false, false, Open},
		{999 * time.Millisecond, "", false, false, Open},
		{time.Second, "fail", true, true, Open}, // the probe fails: open again from t=1s
		{1500 * time.Millisecond, "", false, false, Open},
		{2 * time.Second, "ok", true, true, Closed}, // the probe succeeds
		{2 * time.Second, "fail", true, false, Closed},
	}
	for i, s := range steps {
		now = t0.Add(s.at)
		allow, probe := b.allow()
		if allow != s.wantAllow || probe != s.wantProbe {
			t.Fatalf("step %d at t0+%v: allow() = %v, %v, want %v, %v", i, s.at, allow, probe, s.wantAllow, s.wantProbe)
		}
		if allow {
			switch s.result {
			case "ok":
				b.success(probe)
			case "fail":
				b.failure(probe, fmt.Errorf("READONLY step %d", i))
			}
		}
		if got := b.get(); got != s.wantState {
			t.Fatalf("step %d at t0+%v after %q: state %v, want %v", i, s.at, s.result, got, s.wantState)
		}
	}
	want := "closed>open open>half-open half-open>open open>half-open half-open>closed"
	if got := join(changes); got != want {
		t.Fatalf("state changes %q, want %q", got, want)
	}
	// Each opening names the consecutive failures and the last one.
	wantTrips := []string{
		"resilient: circuit open after 3 consecutive failures; last: READONLY step 5 reopened=false",
		"resilient: circuit open after 4 consecutive failures; last: READONLY step 8 reopened=true",
	}
	if fmt.Sprint(trips) != fmt.Sprint(wantTrips) {
		t.Fatalf("trips %q, want %q", trips, wantTrips)
	}
}

// TestCircuitOpenError: a call the open breaker refuses gets the error that
// opened it, which wraps ErrCircuitOpen and store.ErrUnavailable (not the
// store's error: the circuit is what refuses now), and its text is
// bounded.
func TestCircuitOpenError(t *testing.T) {
	now := time.Unix(0, 0)
	b := &breaker{limit: 2, cooldown: time.Second, now: func() time.Time { return now }}
	if err := b.refusal(); err != ErrCircuitOpen {
		t.Fatalf("refusal before any trip = %v, want ErrCircuitOpen", err)
	}
	cause := fmt.Errorf("redis: take: %w: NOPERM this user has no permissions", store.ErrBadRequest)
	b.failure(false, errors.New("first"))
	b.failure(false, cause)
	err := b.refusal()
	var coe *CircuitOpenError
	if !errors.As(err, &coe) || coe.Failures != 2 || coe.Last != cause {
		t.Fatalf("refusal = %#v, want a *CircuitOpenError of 2 failures, last %v", err, cause)
	}
	if !errors.Is(err, ErrCircuitOpen) || !errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrBadRequest) {
		t.Errorf("refusal %v: Is ErrCircuitOpen %v, ErrUnavailable %v, the cause's ErrBadRequest %v; want true, true, false",
			err, errors.Is(err, ErrCircuitOpen), errors.Is(err, store.ErrUnavailable), errors.Is(err, store.ErrBadRequest))
	}
	long := &CircuitOpenError{Failures: 5, Last: errors.New(string(make([]byte, 2000)) + "é")}
	if n := len(long.Error()); n > 400 {
		t.Errorf("a long cause gives a message of %d bytes", n)
	}
}

// TestBreakerOneProbe checks that only one call probes while half-open.
func TestBreakerOneProbe(t *testing.T) {
	now := time.Unix(0, 0)
	b := &breaker{limit: 1, cooldown: time.Second, now: func() time.Time { return now }}
	b.failure(false, errors.New("down"))
	now = now.Add(time.Second)
	if ok, probe := b.allow(); !ok || !probe {
		t.Fatalf("first call after the cool-down: allow() = %v, %v, want the probe", ok, probe)
	}
	if ok, _ := b.allow(); ok {
		t.Fatal("second call while the probe is out was allowed")
	}
	b.cancelProbe()
	if ok, probe := b.allow(); !ok || !probe {
		t.Fatalf("after a cancelled probe: allow() = %v, %v, want a new probe", ok, probe)
	}
}

func join(ss []string) string {
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += " "
		}
		out += s
	}
	return out
}
