package policy

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memory"
)

// Scenario files (testdata/scenarios/*.txt) are timelines of requests and
// the decisions they must get, run by one runner against every store:
//
//	# comment
//	config:
//	  domain: d            (indented YAML, up to "end")
//	end
//	@1.5s decide d {k=v k2=v2} {k3=v3} hits=2 priority=low => OVER_LIMIT [OK:r=3 OVER] strategy=reject
//	@2s x5 decide d {k=v} => OK
//	@2s peek d {k=v} => OK [OK:r=0]
//	@3s override d rule 10       (requests_per_unit; optional period and burst)
//	@3s unoverride d rule
//	@3s scale d rule 0.5
//
// "@t" is the time since the start (a UTC midnight, so fixed windows line
// up); "xN" repeats a step N times. After "=>": the overall code, then
// optionally one status per descriptor in brackets — OK, OVER, none (no
// rule applied) or unlimited, with ":r=N" (Remaining), ":retry=D"
// (RetryAfter), ":b" (borrowed), ":shadow", ":rule=NAME" — and response
// fields strategy=, fallback=, delay=, priority=.

// scenarioStore is a store under test with its clock.
type scenarioStore struct {
	name string
	open func(t *testing.T, clock func() time.Time) (store.Store, []Option)
}

// scenarioStores lists the stores every scenario runs on; stores in other
// packages add themselves from their own test files.
var scenarioStores = []scenarioStore{{
	name: "memory",
	open: func(t *testing.T, clock func() time.Time) (store.Store, []Option) {
		st, err := memory.New(memory.WithClock(clock), memory.WithSweepInterval(0))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st, nil
	},
}}

var scenarioT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/scenarios/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, ss := range scenarioStores {
		t.Run(ss.name, func(t *testing.T) {
			// One store per kind, shared by the scenarios (each with its
			// own key prefix and a clock reset to the start).
			clock := &fakeClock{t: scenarioT0}
			st, opts := ss.open(t, clock.Now)
			for _, f := range files {
				t.Run(filepath.Base(f), func(t *testing.T) {
					clock.Set(scenarioT0)
					o := append(append([]Option(nil), opts...), WithKeyPrefix(prefixOf(opts)+filepath.Base(f)+":"))
					runScenario(t, f, st, o, clock)
				})
			}
		})
	}
}

// prefixOf returns the key prefix opts set (DefaultKeyPrefix if none).
func prefixOf(opts []Option) string {
	o := options{prefix: DefaultKeyPrefix}
	for _, f := range opts {
		f(&o)
	}
	return o.prefix
}

func runScenario(t *testing.T, path string, st store.Store, opts []Option, clock *fakeClock) {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var e *Engine
	ln := 0
	for sc.Scan() {
		ln++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if line == "config:" {
			var b strings.Builder
			start := ln
			for sc.Scan() {
				ln++
				if strings.TrimSpace(sc.Text()) == "end" {
					break
				}
				b.WriteString(strings.TrimPrefix(sc.Text(), "  ") + "\n")
			}
			cfg, err := Parse(fmt.Sprintf("%s:%d", path, start), []byte(b.String()))
			if err != nil {
				t.Fatalf("%s:%d: config: %v", path, start, err)
			}
			if e == nil {
				e, err = NewEngine(cfg, st, append(opts, WithClock(clock.Now))...)
				if err != nil {
					t.Fatal(err)
				}
			} else if err := e.SetConfig(cfg); err != nil {
				t.Fatalf("%s:%d: SetConfig: %v", path, start, err)
			}
			continue
		}
		if e == nil {
			t.Fatalf("%s:%d: step before config", path, ln)
		}
		runStep(t, fmt.Sprintf("%s:%d", path, ln), line, e, clock)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

func runStep(t *testing.T, where, line string, e *Engine, clock *fakeClock) {
	t.Helper()
	step, want, _ := strings.Cut(line, "=>")
	f := strings.Fields(step)
	if len(f) < 2 || !strings.HasPrefix(f[0], "@") {
		t.Fatalf("%s: want @time verb ...", where)
	}
	at, err := time.ParseDuration(f[0][1:])
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	clock.Set(scenarioT0.Add(at))
	f = f[1:]
	repeat := 1
	if strings.HasPrefix(f[0], "x") {
		if n, err := strconv.Atoi(f[0][1:]); err == nil {
			repeat, f = n, f[1:]
		}
	}
	ctx := context.Background()
	switch f[0] {
	case "override":
		o := Override{}
		o.RequestsPerUnit, _ = strconv.ParseInt(f[3], 10, 64)
		if len(f) > 4 {
			o.Period, _ = time.ParseDuration(f[4])
		}
		if err := e.SetOverride(f[1], f[2], o); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		return
	case "unoverride":
		if had, err := e.RemoveOverride(f[1], f[2]); !had || err != nil {
			t.Fatalf("%s: no override removed (%v)", where, err)
		}
		return
	case "scale":
		factor, _ := strconv.ParseFloat(f[3], 64)
		if err := e.SetRateScale(f[1], f[2], factor, "scenario"); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		return
	case "decide", "peek":
	default:
		t.Fatalf("%s: unknown verb %q", where, f[0])
	}
	req := parseRequest(t, where, f[1:])
	for i := 0; i < repeat; i++ {
		var resp Response
		if f[0] == "decide" {
			resp, err = e.Decide(ctx, req)
		} else {
			resp, err = e.Peek(ctx, req)
		}
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if msg := checkResponse(resp, strings.TrimSpace(want)); msg != "" {
			t.Fatalf("%s (repeat %d of %d): %s\n  got %s", where, i+1, repeat, msg, describeResponse(resp))
		}
	}
}

// parseRequest reads "domain {k=v ...} {k=v} hits=N priority=P".
func parseRequest(t *testing.T, where string, f []string) Request {
	t.Helper()
	req := Request{Domain: f[0]}
	var cur *Descriptor
	for _, tok := range f[1:] {
		open := strings.HasPrefix(tok, "{")
		tok = strings.TrimPrefix(tok, "{")
		closing := strings.HasSuffix(tok, "}")
		tok = strings.TrimSuffix(tok, "}")
		switch {
		case open:
			req.Descriptors = append(req.Descriptors, Descriptor{})
			cur = &req.Descriptors[len(req.Descriptors)-1]
			fallthrough
		case cur != nil:
			if tok != "" {
				k, v, _ := strings.Cut(tok, "=")
				if k == "#hits" {
					cur.Hits, _ = strconv.ParseInt(v, 10, 64)
				} else {
					cur.Entries = append(cur.Entries, Entry{k, v})
				}
			}
			if closing {
				cur = nil
			}
		case strings.HasPrefix(tok, "hits="):
			req.Hits, _ = strconv.ParseInt(tok[5:], 10, 64)
		case strings.HasPrefix(tok, "priority="):
			req.Priority = tok[9:]
		default:
			t.Fatalf("%s: bad request token %q", where, tok)
		}
	}
	return req
}

func checkResponse(resp Response, want string) string {
	f := strings.Fields(want)
	if len(f) == 0 {
		return "no expectation"
	}
	if got := resp.Code.String(); got != f[0] {
		return fmt.Sprintf("code %s, want %s", got, f[0])
	}
	f = f[1:]
	if len(f) > 0 && strings.HasPrefix(f[0], "[") {
		var sts []string
		for len(f) > 0 {
			sts = append(sts, strings.Trim(f[0], "[]"))
			done := strings.HasSuffix(f[0], "]")
			f = f[1:]
			if done {
				break
			}
		}
		if len(sts) != len(resp.Statuses) {
			return fmt.Sprintf("%d statuses, want %d", len(resp.Statuses), len(sts))
		}
		for i, w := range sts {
			if msg := checkStatus(resp.Statuses[i], w); msg != "" {
				return fmt.Sprintf("status %d: %s", i, msg)
			}
		}
	}
	for _, kv := range f {
		k, v, _ := strings.Cut(kv, "=")
		var got string
		switch k {
		case "strategy":
			got = resp.Strategy
		case "fallback":
			got = resp.Fallback
		case "delay":
			got = resp.Delay.String()
		case "priority":
			got = resp.Priority
		default:
			return "unknown expectation " + kv
		}
		if got != v {
			return fmt.Sprintf("%s %q, want %q", k, got, v)
		}
	}
	return ""
}

func checkStatus(s Status, want string) string {
	parts := strings.Split(want, ":")
	switch parts[0] {
	case "OK", "OVER":
		code := CodeOK
		if parts[0] == "OVER" {
			code = CodeOverLimit
		}
		if !s.Matched || s.Unlimited || s.Code != code {
			return fmt.Sprintf("got %s, want %s", describeStatus(s), want)
		}
	case "none":
		if s.Matched || s.Code != CodeOK {
			return fmt.Sprintf("got %s, want no rule", describeStatus(s))
		}
	case "unlimited":
		if !s.Matched || !s.Unlimited || s.Code != CodeOK {
			return fmt.Sprintf("got %s, want unlimited", describeStatus(s))
		}
	default:
		return "bad status expectation " + want
	}
	for _, p := range parts[1:] {
		k, v, _ := strings.Cut(p, "=")
		ok := true
		switch k {
		case "r":
			ok = strconv.FormatInt(s.Decision.Remaining, 10) == v
		case "retry":
			ok = s.Decision.RetryAfter.String() == v || (v == "never" && s.Decision.IsNever())
		case "b":
			ok = s.Borrowed
		case "shadow":
			ok = s.Shadow
		case "rule":
			ok = s.Rule == v
		case "limit":
			ok = strconv.FormatInt(s.Decision.Limit, 10) == v
		default:
			return "bad status expectation " + p
		}
		if !ok {
			return fmt.Sprintf("got %s, want %s", describeStatus(s), want)
		}
	}
	return ""
}

func describeStatus(s Status) string {
	if !s.Matched {
		return "none"
	}
	if s.Unlimited {
		return "unlimited"
	}
	code := "OK"
	if s.Code == CodeOverLimit {
		code = "OVER"
	}
	retry := s.Decision.RetryAfter.String()
	if s.Decision.RetryAfter == algo.Never {
		retry = "never"
	}
	out := fmt.Sprintf("%s:r=%d:limit=%d:retry=%s:rule=%s", code, s.Decision.Remaining, s.Decision.Limit, retry, s.Rule)
	if s.Borrowed {
		out += ":b"
	}
	if s.Shadow {
		out += ":shadow"
	}
	var ls []string
	for _, l := range s.Limits {
		ls = append(ls, fmt.Sprintf("%s(%v,r=%d)", l.Name, l.Decision.Allowed, l.Decision.Remaining))
	}
	return out + " limits=" + strings.Join(ls, ",")
}

func describeResponse(r Response) string {
	var sts []string
	for _, s := range r.Statuses {
		sts = append(sts, describeStatus(s))
	}
	return fmt.Sprintf("%s [%s] strategy=%s fallback=%s delay=%v priority=%s", r.Code, strings.Join(sts, " "), r.Strategy, r.Fallback, r.Delay, r.Priority)
}
