package storetest

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

//go:embed testdata/*.txt
var traceFiles embed.FS

// trace is a parsed scenario file.
type trace struct {
	file   string
	limits map[string]limitDecl // by name; "" is the only, unnamed limit
	steps  []step
	star   bool // limit * ...: run for every algorithm
}

// limitDecl is a limit line; Algorithm is 0 for *.
type limitDecl struct {
	p    algo.Params
	line int
}

type opKind int

const (
	opTake opKind = iota
	opPeek
	opRefund
	opRelease
	opReset
)

var opNames = map[string]opKind{"take": opTake, "peek": opPeek, "refund": opRefund, "release": opRelease, "reset": opReset}

// part is one key of a step.
type part struct {
	key, limit string
	cost       int64
	lease      uint64
}

// expect is a step's expected decision; nil fields are not checked.
type expect struct {
	allowed   bool
	remaining *int64
	retry     *time.Duration
	reset     *time.Duration
	delay     *time.Duration
}

type step struct {
	line  int
	at    time.Duration
	op    opKind
	parts []part
	want  *expect
}

// traceError is a problem in a trace file, reported as file:line.
func traceError(file string, line int, format string, args ...any) error {
	return fmt.Errorf("%s:%d: %s", file, line, fmt.Sprintf(format, args...))
}

// parseTrace parses a scenario file; see the package doc for the format.
func parseTrace(file, text string) (*trace, error) {
	tr := &trace{file: file, limits: make(map[string]limitDecl)}
	var last time.Duration
	for i, raw := range strings.Split(text, "\n") {
		line := i + 1
		s := strings.TrimSpace(raw)
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		f := strings.Fields(s)
		switch f[0] {
		case "limit":
			if len(tr.steps) > 0 {
				return nil, traceError(file, line, "limits must come before the steps")
			}
			name, decl, err := parseLimit(f[1:])
			if err != nil {
				return nil, traceError(file, line, "%v", err)
			}
			decl.line = line
			if _, dup := tr.limits[name]; dup {
				return nil, traceError(file, line, "limit %q declared twice", name)
			}
			if decl.p.Algorithm == 0 {
				tr.star = true
			}
			tr.limits[name] = decl
		case "at":
			st, err := parseStep(f[1:], s)
			if err != nil {
				return nil, traceError(file, line, "%v", err)
			}
			st.line = line
			if st.at < last {
				return nil, traceError(file, line, "time %v is before the previous step's %v", st.at, last)
			}
			last = st.at
			for _, p := range st.parts {
				if _, ok := tr.limits[p.limit]; !ok {
					return nil, traceError(file, line, "key %q: no limit named %q", p.key, p.limit)
				}
			}
			if tr.star && st.want != nil {
				return nil, traceError(file, line, "a trace for every algorithm (limit *) cannot expect decisions")
			}
			tr.steps = append(tr.steps, st)
		default:
			return nil, traceError(file, line, "unknown directive %q (want limit or at)", f[0])
		}
	}
	if len(tr.limits) == 0 {
		return nil, traceError(file, 1, "no limit declared")
	}
	if tr.star && len(tr.limits) > 1 {
		return nil, traceError(file, 1, "a trace for every algorithm (limit *) declares one limit")
	}
	if len(tr.limits) > 1 {
		if _, ok := tr.limits[""]; ok {
			return nil, traceError(file, 1, "with several limits, every limit needs a name")
		}
	}
	return tr, nil
}

func parseLimit(f []string) (string, limitDecl, error) {
	var d limitDecl
	name := ""
	if len(f) > 0 && strings.HasSuffix(f[0], ":") {
		name = strings.TrimSuffix(f[0], ":")
		f = f[1:]
	}
	if len(f) < 2 {
		return "", d, errors.New("want: limit [name:] <algorithm> <N>[/<period>] [options]")
	}
	if f[0] != "*" {
		k, err := algo.ParseKind(f[0])
		if err != nil {
			return "", d, err
		}
		d.p.Algorithm = k
	}
	n, per, hasPer := strings.Cut(f[1], "/")
	v, err := strconv.ParseInt(n, 10, 64)
	if err != nil {
		return "", d, fmt.Errorf("limit %q: %v", n, err)
	}
	d.p.Limit = v
	if hasPer {
		switch per {
		case "month":
			d.p.Calendar = algo.CalendarMonth
		case "year":
			d.p.Calendar = algo.CalendarYear
		default:
			if d.p.Period, err = time.ParseDuration(per); err != nil {
				return "", d, fmt.Errorf("period %q: %v", per, err)
			}
		}
	}
	for _, kv := range f[2:] {
		k, val, ok := strings.Cut(kv, "=")
		if !ok {
			return "", d, fmt.Errorf("option %q: want key=value", kv)
		}
		if err := setOption(&d.p, k, val); err != nil {
			return "", d, fmt.Errorf("option %s: %v", k, err)
		}
	}
	if d.p.Algorithm != 0 {
		if _, err := algo.Compile(d.p); err != nil {
			return "", d, err
		}
	}
	return name, d, nil
}

func setOption(p *algo.Params, k, v string) error {
	var err error
	i := func() int64 {
		var n int64
		n, err = strconv.ParseInt(v, 10, 64)
		return n
	}
	dur := func() time.Duration {
		var d time.Duration
		d, err = time.ParseDuration(v)
		return d
	}
	fl := func() float64 {
		var x float64
		x, err = strconv.ParseFloat(v, 64)
		return x
	}
	switch k {
	case "burst":
		p.Burst = i()
	case "initial":
		n := i()
		p.InitialTokens = &n
	case "sub":
		p.SubWindows = int(i())
	case "delay":
		p.Delay = i()
	case "warmup":
		p.WarmupPeriod = dur()
	case "cold":
		p.ColdFactor = fl()
	case "maxburst":
		p.MaxBurstSeconds = fl()
	case "maxwait":
		p.MaxWait = dur()
	case "lease":
		p.LeaseTTL = dur()
	case "retain":
		p.Retain = dur()
	default:
		return errors.New("unknown option (want burst, initial, sub, delay, warmup, cold, maxburst, maxwait, lease or retain)")
	}
	return err
}

func parseDuration(s string) (time.Duration, error) {
	if s == "0" {
		return 0, nil
	}
	return time.ParseDuration(s)
}

func parseStep(f []string, whole string) (step, error) {
	var st step
	if len(f) < 3 {
		return st, errors.New("want: at <offset> <op> <key> ...")
	}
	at, err := parseDuration(f[0])
	if err != nil || at < 0 {
		return st, fmt.Errorf("offset %q: want a non-negative duration", f[0])
	}
	st.at = at
	op, ok := opNames[f[1]]
	if !ok {
		return st, fmt.Errorf("unknown op %q (want take, peek, refund, release or reset)", f[1])
	}
	st.op = op
	body := whole[strings.Index(whole, f[1])+len(f[1]):]
	body, exp, hasExp := strings.Cut(body, "->")
	if hasExp {
		if op != opTake && op != opPeek {
			return st, fmt.Errorf("%s cannot expect a decision", f[1])
		}
		w, err := parseExpect(strings.Fields(exp))
		if err != nil {
			return st, err
		}
		st.want = w
	}
	for _, p := range strings.Split(body, ",") {
		pf := strings.Fields(p)
		if len(pf) == 0 {
			return st, errors.New("empty key part")
		}
		pt := part{key: pf[0]}
		if k, lim, ok := strings.Cut(pf[0], "@"); ok {
			pt.key, pt.limit = k, lim
		}
		rest := pf[1:]
		if op != opReset && op != opRelease {
			if len(rest) == 0 {
				return st, fmt.Errorf("key %q: missing cost", pf[0])
			}
			if pt.cost, err = strconv.ParseInt(rest[0], 10, 64); err != nil {
				return st, fmt.Errorf("key %q: cost %q: %v", pf[0], rest[0], err)
			}
			rest = rest[1:]
		}
		for _, kv := range rest {
			v, ok := strings.CutPrefix(kv, "lease=")
			if !ok || (op != opTake && op != opRelease) {
				return st, fmt.Errorf("unexpected %q", kv)
			}
			if pt.lease, err = strconv.ParseUint(v, 10, 64); err != nil {
				return st, fmt.Errorf("lease %q: %v", v, err)
			}
		}
		if op == opRelease && pt.lease == 0 {
			return st, errors.New("release needs lease=N (N > 0)")
		}
		st.parts = append(st.parts, pt)
	}
	if len(st.parts) > 1 && op != opTake {
		return st, fmt.Errorf("%s takes one key", f[1])
	}
	return st, nil
}

func parseExpect(f []string) (*expect, error) {
	if len(f) == 0 {
		return nil, errors.New("-> needs allowed or denied")
	}
	w := &expect{}
	switch f[0] {
	case "allowed":
		w.allowed = true
	case "denied":
	default:
		return nil, fmt.Errorf("expected %q, want allowed or denied", f[0])
	}
	for _, kv := range f[1:] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("expectation %q: want key=value", kv)
		}
		switch k {
		case "remaining":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("remaining %q: %v", v, err)
			}
			w.remaining = &n
		case "retry", "reset", "delay":
			var d time.Duration
			if v == "never" && k == "retry" {
				d = algo.Never
			} else {
				var err error
				if d, err = parseDuration(v); err != nil {
					return nil, fmt.Errorf("%s %q: %v", k, v, err)
				}
			}
			switch k {
			case "retry":
				w.retry = &d
			case "reset":
				w.reset = &d
			default:
				w.delay = &d
			}
		default:
			return nil, fmt.Errorf("unknown expectation %q (want remaining, retry, reset or delay)", k)
		}
	}
	return w, nil
}

// mismatch describes how d, of a step whose overall outcome is allowed,
// differs from w, or returns "".
func (w *expect) mismatch(d algo.Decision, allowed bool) string {
	var diffs []string
	if allowed != w.allowed {
		diffs = append(diffs, fmt.Sprintf("allowed=%v", allowed))
	}
	if w.remaining != nil && d.Remaining != *w.remaining {
		diffs = append(diffs, fmt.Sprintf("remaining=%d", d.Remaining))
	}
	if w.retry != nil && d.RetryAfter != *w.retry {
		diffs = append(diffs, fmt.Sprintf("retry=%v", d.RetryAfter))
	}
	if w.reset != nil && d.ResetAfter != *w.reset {
		diffs = append(diffs, fmt.Sprintf("reset=%v", d.ResetAfter))
	}
	if w.delay != nil && d.Delay != *w.delay {
		diffs = append(diffs, fmt.Sprintf("delay=%v", d.Delay))
	}
	return strings.Join(diffs, " ")
}

// loadTraces parses every embedded scenario file.
func loadTraces() ([]*trace, error) {
	names, err := fs.Glob(traceFiles, "testdata/*.txt")
	if err != nil {
		return nil, err
	}
	var out []*trace
	for _, n := range names {
		b, err := traceFiles.ReadFile(n)
		if err != nil {
			return nil, err
		}
		tr, err := parseTrace(path.Base(n), string(b))
		if err != nil {
			return nil, err
		}
		out = append(out, tr)
	}
	return out, nil
}

// starParams fills in a * limit for algorithm k.
func starParams(p algo.Params, k algo.Kind) algo.Params {
	p.Algorithm = k
	if p.Period == 0 && p.Calendar == algo.CalendarNone {
		p.Period = time.Second
	}
	switch k {
	case algo.SmoothWarmup:
		if p.WarmupPeriod == 0 {
			p.WarmupPeriod = p.Period
		}
	case algo.Concurrency:
		if p.LeaseTTL == 0 {
			p.LeaseTTL = p.Period
		}
	}
	return p
}

// traceRun drives one trace through a store and the reference.
type traceRun struct {
	t      *testing.T
	tr     *trace
	st     store.Store
	ref    *Reference
	clock  *Clock
	ns     string
	limits map[string]*algo.Limit
	// lastAt is the store time of each key's last admitted take, for refunds.
	lastAt map[string]int64
}

func testTraces(t *testing.T, h *Harness) {
	traces, err := loadTraces()
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range traces {
		kinds := []algo.Kind{0}
		if tr.star {
			kinds = h.Kinds
		} else {
			for _, d := range tr.limits {
				if !h.supports(d.p.Algorithm) {
					kinds = nil
				}
			}
		}
		for _, k := range kinds {
			name := tr.file
			if tr.star {
				name += "/" + k.String()
			}
			t.Run(name, func(t *testing.T) {
				if h.Parallel {
					t.Parallel()
				}
				clock := NewClock(Epoch)
				runTrace(t, tr, k, h.open(t, clock.Now), clock)
			})
		}
	}
}

// runTrace runs tr (for algorithm k if it is a * trace) against st, whose
// clock is clock; st nil checks the file's expectations against the
// reference alone.
func runTrace(t *testing.T, tr *trace, k algo.Kind, st store.Store, clock *Clock) {
	r := &traceRun{t: t, tr: tr, st: st, ref: NewReference(), clock: clock, ns: namespace(t),
		limits: make(map[string]*algo.Limit), lastAt: make(map[string]int64)}
	for name, d := range tr.limits {
		p := d.p
		if tr.star {
			p = starParams(p, k)
		}
		l, err := algo.Compile(p)
		if err != nil {
			t.Fatalf("%s:%d: %v", tr.file, d.line, err)
		}
		r.limits[name] = l
	}
	for _, s := range tr.steps {
		clock.Set(Epoch.Add(s.at))
		r.step(s)
		if t.Failed() {
			return
		}
	}
}

func (r *traceRun) request(p part) store.Request {
	return store.Request{Key: r.ns + p.key, Limit: r.limits[p.limit], Cost: p.cost, Lease: p.lease}
}

func (r *traceRun) step(s step) {
	t := r.t
	where := fmt.Sprintf("%s:%d", r.tr.file, s.line)
	now := r.clock.micros()
	reqs := make([]store.Request, len(s.parts))
	for i, p := range s.parts {
		reqs[i] = r.request(p)
	}
	switch s.op {
	case opTake:
		ok, want := r.ref.Take(reqs, now)
		if s.want != nil {
			if d := s.want.mismatch(want[0], ok); d != "" {
				t.Errorf("%s: the reference decides %s (overall %v); the trace expects otherwise: %s", where, formatDecision(want[0]), ok, d)
			}
		}
		if ok {
			for _, q := range reqs {
				r.lastAt[q.Key] = now
			}
		}
		if r.st == nil {
			return
		}
		out := make([]algo.Decision, len(reqs))
		res, err := r.st.Take(t.Context(), reqs, out)
		if err != nil {
			t.Fatalf("%s: Take: %v", where, err)
		}
		if res.Allowed != ok {
			t.Errorf("%s: Take: store Result.Allowed = %v, reference %v", where, res.Allowed, ok)
		}
		if res.At != now {
			t.Errorf("%s: Take: store Result.At = %d, want the injected clock's %d", where, res.At, now)
		}
		for i := range out {
			if out[i] != want[i] {
				t.Errorf("%s: Take request %d (%s): store decides %s, reference %s", where, i, s.parts[i].key, formatDecision(out[i]), formatDecision(want[i]))
			}
		}
	case opPeek:
		want := r.ref.Peek(reqs[0], now)
		if s.want != nil {
			if d := s.want.mismatch(want, want.Allowed); d != "" {
				t.Errorf("%s: the reference peeks %s; the trace expects otherwise: %s", where, formatDecision(want), d)
			}
		}
		if r.st == nil {
			return
		}
		out := make([]algo.Decision, 1)
		if err := r.st.Peek(t.Context(), reqs, out); err != nil {
			t.Fatalf("%s: Peek: %v", where, err)
		}
		if out[0] != want {
			t.Errorf("%s: Peek: store %s, reference %s", where, formatDecision(out[0]), formatDecision(want))
		}
	case opRefund:
		reqs[0].At = r.lastAt[reqs[0].Key]
		if reqs[0].At == 0 {
			t.Fatalf("%s: refund of %s, which has no admitted take before", where, s.parts[0].key)
		}
		r.ref.Refund(reqs[0], now)
		if r.st != nil {
			if err := r.st.Refund(t.Context(), reqs); err != nil {
				t.Fatalf("%s: Refund: %v", where, err)
			}
		}
	case opRelease:
		r.ref.Release(reqs[0], now)
		if r.st != nil {
			if err := r.st.Release(t.Context(), reqs); err != nil {
				t.Fatalf("%s: Release: %v", where, err)
			}
		}
	case opReset:
		r.ref.Reset(reqs[0].Key)
		if r.st != nil {
			if err := r.st.Reset(t.Context(), reqs[0].Key); err != nil {
				t.Fatalf("%s: Reset: %v", where, err)
			}
		}
	}
}
