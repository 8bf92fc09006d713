package policy

import (
	"context"
	"strconv"
	"testing"
)

// Benchmarks of Decide on the memory store: the policy engine's own cost
// (matching, planning, keys, statuses) on top of the store's. Compare with
// store/memory's BenchmarkTake for the store alone.

func benchEngine(b *testing.B, yaml string) *Engine {
	b.Helper()
	cfg := mustParse(b, yaml)
	return newMemEngine(b, cfg, nil)
}

const benchConfig = `
domain: bench
hierarchy: true
rate_limit: {name: global, unit: hour, requests_per_unit: 1000000000000}
descriptors:
  - key: ip
    hierarchy: false
    rate_limit: {unit: hour, requests_per_unit: 1000000000000}
  - key: tenant
    rate_limit: {name: tenant, unit: hour, requests_per_unit: 1000000000000}
    descriptors:
      - key: user
        rate_limit: {name: user, unit: hour, requests_per_unit: 1000000000000}
        descriptors:
          - key: path
            rate_limit: {name: endpoint, unit: hour, requests_per_unit: 1000000000000}
`

// keyed builds n distinct requests so that the key population is real
// (n = 1 measures one hot key).
func keyed(n int, mk func(i string) Request) []Request {
	out := make([]Request, n)
	for i := range out {
		out[i] = mk(strconv.Itoa(i))
	}
	return out
}

func benchDecide(b *testing.B, e *Engine, reqs []Request) {
	ctx := context.Background()
	// Populate every key first, and check it was.
	for _, r := range reqs {
		if resp, err := e.Decide(ctx, r); err != nil || resp.Code != CodeOK {
			b.Fatalf("warm-up: %v %v", resp.Code, err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, err := e.Decide(ctx, reqs[i%len(reqs)]); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}

func BenchmarkDecide(b *testing.B) {
	for _, keys := range []int{1, 10_000} {
		b.Run("one-descriptor/keys="+strconv.Itoa(keys), func(b *testing.B) {
			benchDecide(b, benchEngine(b, benchConfig), keyed(keys, func(i string) Request {
				return req("bench", ent("ip", "10.0."+i))
			}))
		})
		b.Run("hierarchy-4-levels/keys="+strconv.Itoa(keys), func(b *testing.B) {
			benchDecide(b, benchEngine(b, benchConfig), keyed(keys, func(i string) Request {
				return req("bench", ent("tenant", "t"+i[len(i)-1:], "user", "u"+i, "path", "/x"))
			}))
		})
		b.Run("two-descriptors/keys="+strconv.Itoa(keys), func(b *testing.B) {
			benchDecide(b, benchEngine(b, benchConfig), keyed(keys, func(i string) Request {
				return req("bench", ent("ip", "10.0."+i), ent("tenant", "t"+i, "user", "u"))
			}))
		})
	}
	b.Run("unmatched", func(b *testing.B) {
		benchDecide(b, benchEngine(b, benchConfig), []Request{req("bench", ent("nothing", "x"))})
	})
}

// BenchmarkLoad measures compiling the example configuration.
func BenchmarkLoad(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Load("../examples/config"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecidePriority measures settling a request's priority class:
// named as declared, in another case, and unknown (the default class).
func BenchmarkDecidePriority(b *testing.B) {
	const yaml = `
domain: bench
priorities: [critical, high, normal, low]
descriptors:
  - key: ip
    rate_limit: {unit: hour, requests_per_unit: 1000000000000, reserve: {normal: 0.1, low: 0.3}}
`
	for _, class := range []string{"low", "Low", "bogus"} {
		b.Run("class="+class, func(b *testing.B) {
			benchDecide(b, benchEngine(b, yaml), keyed(1, func(i string) Request {
				r := req("bench", ent("ip", "10.0."+i))
				r.Priority = class
				return r
			}))
		})
	}
}
