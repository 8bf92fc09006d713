// Package floodgate is the module root of Floodgate, a distributed rate
// limiter: a Go library, a server (floodgate serve) and a CLI that let a
// fleet of instances share limits exactly, on an embedded store or on
// Redis, Redis Cluster and Memcached. This package holds no code; start
// from the package that fits what you are doing:
//
//   - limiter: the library facade. limiter.New(store, name, algo.Params)
//     gives Allow, AllowN, Reserve, Wait, Peek, Reset and Acquire per key;
//     limiter.AllowAll takes from several limits all or nothing;
//     limiter.NewLocal replaces a single golang.org/x/time/rate limiter.
//   - algo: the algorithms (fixed window, sliding log, sliding window,
//     token bucket, GCRA, shaper, smooth bursty and warm-up, concurrency)
//     as pure functions, and algo.Params.
//   - store/memory (embedded, the default), store/redis, store/memcached,
//     and store/storeurl to open any of them from a URL such as
//     redis://127.0.0.1:6379 or redis-cluster://h1:7000,h2:7001;
//     store/resilient adds a timeout, a circuit breaker and a failure
//     policy (fail open, closed, to a local share, or fail the request); store/lease serves
//     hot keys from slices of their budget taken ahead.
//   - middleware (net/http, chi) and middleware/ginlimit (gin): limits at
//     the HTTP edge with the IETF RateLimit fields, X-RateLimit-* and
//     Retry-After; headers writes those fields.
//   - policy and dimension: envoyproxy/ratelimit-compatible YAML rules
//     (domains, descriptors, hierarchies, strategies on excess) and the
//     mapping from an HTTP request to descriptors.
//   - server, gateway: what floodgate serve runs (the Envoy rate limit
//     gRPC API, /json, /v1, admin API, gateway mode).
//
// The command is ./cmd/floodgate (serve, validate, sim, bench, version).
// The README and docs/ hold the configuration reference, the store set-up
// and the measured numbers.
package floodgate
