package policy

import (
	"context"
	"strings"
	"testing"
)

// On the memory store a plan's keys alias a buffer that the next decision
// reuses (Engine.appendKey). What outlives the decision must not: a
// response's leases are released by key after other decisions have
// rewritten the buffer, and Keys' result is kept by its caller.
func TestKeysOutliveLaterDecisions(t *testing.T) {
	cfg := mustParse(t, "domain: d\ndescriptors:\n  - key: job\n    rate_limit: {algorithm: concurrency, requests_per_unit: 1, lease_ttl: 1h}\n")
	e := newMemEngine(t, cfg, frozen(scenarioT0))
	if !e.aliasKeys {
		t.Fatal("an Engine on the memory store does not alias its keys: the test checks nothing")
	}
	ctx := context.Background()
	held, err := e.Decide(ctx, req("d", ent("job", "a")))
	if err != nil || held.Code != CodeOK || !held.Holds() {
		t.Fatalf("first lease: %v %v holds=%v", held.Code, err, held.Holds())
	}
	keys, err := e.Keys(req("d", ent("job", "a")))
	if err != nil || len(keys) != 1 {
		t.Fatalf("Keys = %q, %v", keys, err)
	}
	want := strings.Clone(keys[0])
	// Other keys, longer and shorter, through the same pooled plans.
	for i, v := range []string{"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", "c", "dddddddd"} {
		resp, err := e.Decide(ctx, req("d", ent("job", v)))
		if err != nil || resp.Code != CodeOK {
			t.Fatalf("decision %d: %v %v", i, resp.Code, err)
		}
		if err := e.Release(ctx, resp); err != nil {
			t.Fatal(err)
		}
	}
	if keys[0] != want {
		t.Fatalf("Keys' result changed to %q after later decisions, want %q", keys[0], want)
	}
	if again, _ := e.Decide(ctx, req("d", ent("job", "a"))); again.Code != CodeOverLimit {
		t.Fatalf("the held slot of job=a: %s, want OVER_LIMIT", again.Code)
	}
	if err := e.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	if again, _ := e.Decide(ctx, req("d", ent("job", "a"))); again.Code != CodeOK {
		t.Fatalf("after releasing the first response's lease: %s, want OK (its key was not job=a's any more)", again.Code)
	}
}

// FuzzAppendEscaped holds appendEscaped to its definition, byte by byte:
// the bytes below '!' and above '~', and % | = # ~ { }, percent-encoded.
func FuzzAppendEscaped(f *testing.F) {
	for _, s := range []string{"", "alice", "a b", "10.0.0.1", "x|y=z#w~v{u}%", "caf\u00e9", "\x00\x7f\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var want []byte
		for i := 0; i < len(s); i++ {
			c := s[i]
			if c <= ' ' || c >= 0x7f || strings.IndexByte("%|=#~{}", c) >= 0 {
				want = append(want, '%', "0123456789ABCDEF"[c>>4], "0123456789ABCDEF"[c&15])
			} else {
				want = append(want, c)
			}
		}
		if got := appendEscaped([]byte("p:"), s); string(got) != "p:"+string(want) {
			t.Fatalf("appendEscaped(%q) = %q, want %q", s, got[2:], want)
		}
	})
}
