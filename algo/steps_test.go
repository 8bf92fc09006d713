package algo

import (
	"fmt"
	"sort"
	"testing"
	"time"
)

// base is the instant t0 of the step tables: 2024-01-01T00:00:00Z, a
// boundary of every window of a minute, an hour or a day.
var base = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()

// op is what a step does.
type op int

const (
	opTake    op = iota // Take (the zero op)
	opPeek              // Peek
	opLease             // TakeLease with step.lease
	opRelease           // Release step.lease; want allowed = it held slots
	opRefund            // Refund cost taken at step.from; nothing checked
	opRenew             // Renew step.lease; want allowed = it held slots
)

// step is one row of a step table: at the named instant, do op with cost
// and check the decision. A row's zero retry, delay and remaining are
// checked like any other value.
type step struct {
	at        string
	op        op
	cost      int64
	lease     uint64
	from      string // opRefund: the instant of the Take being refunded
	allowed   bool
	remaining int64
	retry     time.Duration
	delay     time.Duration
}

// instants names points in time as offsets from base.
type instants map[string]time.Duration

func (in instants) at(t *testing.T, name string) int64 {
	t.Helper()
	d, ok := in[name]
	if !ok {
		names := make([]string, 0, len(in))
		for k := range in {
			names = append(names, k)
		}
		sort.Strings(names)
		t.Fatalf("step table names instant %q, which is not one of %v", name, names)
	}
	return base + d.Microseconds()
}

// mustCompile compiles p or stops the test.
func mustCompile(tb testing.TB, p Params) *Limit {
	tb.Helper()
	l, err := Compile(p)
	if err != nil {
		tb.Fatalf("Compile(%+v): %v", p, err)
	}
	return l
}

// runSteps plays steps against one fresh state and reports every mismatch
// as, e.g., "Take(t3, 2) = false, want true". It returns the final state.
func runSteps(t *testing.T, l *Limit, in instants, steps []step) *State {
	t.Helper()
	return playSteps(t, l, in, steps, false)
}

// runStoreSteps plays steps as a store keeps the state: forgotten (made
// fresh) once its ExpiresAt has passed, and not written by a Peek.
func runStoreSteps(t *testing.T, l *Limit, in instants, steps []step) *State {
	t.Helper()
	return playSteps(t, l, in, steps, true)
}

func playSteps(t *testing.T, l *Limit, in instants, steps []step, store bool) *State {
	t.Helper()
	s := &State{}
	for i, st := range steps {
		now := in.at(t, st.at)
		if store && l.ExpiresAt(s) <= now {
			*s = State{}
		}
		var d Decision
		var call string
		switch st.op {
		case opTake:
			call = fmt.Sprintf("Take(%s, %d)", st.at, st.cost)
			d = l.Take(s, now, st.cost)
		case opPeek:
			call = fmt.Sprintf("Peek(%s, %d)", st.at, st.cost)
			if store {
				c := s.Clone()
				d = l.Peek(&c, now, st.cost)
			} else {
				d = l.Peek(s, now, st.cost)
			}
		case opLease:
			call = fmt.Sprintf("TakeLease(%s, %d, lease %d)", st.at, st.cost, st.lease)
			d = l.TakeLease(s, now, st.cost, st.lease)
		case opRelease:
			call = fmt.Sprintf("Release(%s, lease %d)", st.at, st.lease)
			if got := l.Release(s, now, st.lease); got != st.allowed {
				t.Errorf("step %d: %s = %v, want %v", i, call, got, st.allowed)
			}
			continue
		case opRenew:
			call = fmt.Sprintf("Renew(%s, lease %d)", st.at, st.lease)
			if got := l.Renew(s, now, st.lease); got != st.allowed {
				t.Errorf("step %d: %s = %v, want %v", i, call, got, st.allowed)
			}
			continue
		case opRefund:
			l.Refund(s, now, in.at(t, st.from), st.cost)
			continue
		}
		if d.Allowed != st.allowed {
			t.Errorf("step %d: %s = %v, want %v", i, call, d.Allowed, st.allowed)
		}
		if d.Remaining != st.remaining {
			t.Errorf("step %d: %s.Remaining = %d, want %d", i, call, d.Remaining, st.remaining)
		}
		if d.RetryAfter != st.retry {
			t.Errorf("step %d: %s.RetryAfter = %s, want %s", i, call, fmtDur(d.RetryAfter), fmtDur(st.retry))
		}
		if d.Delay != st.delay {
			t.Errorf("step %d: %s.Delay = %v, want %v", i, call, d.Delay, st.delay)
		}
		if d.Limit != l.Capacity() {
			t.Errorf("step %d: %s.Limit = %d, want the capacity %d", i, call, d.Limit, l.Capacity())
		}
	}
	return s
}

func fmtDur(d time.Duration) string {
	if d == Never {
		return "Never"
	}
	return d.String()
}

func ptr[T any](v T) *T { return &v }
