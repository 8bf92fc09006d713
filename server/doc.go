// Package server is the floodgate server's transports: the Envoy rate limit
// service over gRPC, its JSON twin and the native API over HTTP, and the
// admin address. cmd/floodgate's serve command wires it to a store and a
// configuration; the decisions themselves are the policy package's.
//
// # APIs
//
//   - gRPC: envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit with
//     go-control-plane's types, the standard grpc.health.v1 service (under
//     "", the service's name and envoyproxy/ratelimit's "ratelimit":
//     SERVING while the store answers, NOT_SERVING while draining) and
//     reflection.
//   - HTTP: POST /json (protojson RateLimitRequest in, RateLimitResponse out;
//     200 OK, 429 OVER_LIMIT, as envoyproxy/ratelimit), POST /v1/decide,
//     POST /v1/peek (both batch-capable), POST /v1/release and /v1/renew
//     (give back or extend concurrency slots), POST /v1/observe (samples
//     for the adaptive controllers; it takes the observe token, else the
//     admin token, else loopback callers only: WithObserveToken) and GET
//     /healthcheck (APIHandler). In
//     gateway mode HTTPHandler is the gateway alone, every path proxied,
//     and the APIs are served apart (floodgate serve --api).
//   - Admin: /metrics, /healthz, /readyz, /dashboard and the token-guarded
//     /admin/api/ (config, inspect, reset, overrides, scales, observe,
//     stats, events; without a token, loopback peers only).
//
// docs/SERVER.md is the reference with every field and status code.
//
// # Semantics
//
// Answers follow envoyproxy/ratelimit: a descriptor no rule matches (or
// without entries) is OK without a limit, an unlimited rule is OK with
// 2^32-1 remaining, a shadow rule's refusal is OK, the global shadow mode
// answers an overall OK over descriptors still OVER_LIMIT, an unknown
// domain is OK (except on /v1, where it is a 404), per-descriptor
// hits_addend (0: a check that charges nothing) and limit apply,
// current_limit is the matched rule's with its configured name (empty
// without one), and the Envoy APIs carry no header fields unless
// WithEnvoyHeaders. The one deliberate difference is the engine's: all
// descriptors of a request are decided all or nothing.
//
// A descriptor the store could not decide (its key's node down while
// another descriptor refused the request, the look a refusal takes at the
// other keys failing, a shadow rule's count failing) states no count: OK
// with no current_limit, limit_remaining or duration_until_reset on the
// Envoy APIs, as a descriptor without a limit; "undecided": true with no
// limit or remaining on /v1; no member in the header fields.
//
// # Concurrency leases
//
// A decision admitted on a concurrency rule holds slots until they are
// given back or their lease_ttl passes. /v1/decide answers such a decision
// with a "lease" token; POST /v1/release {"lease": token} gives the slots
// back (204; again, or after they expired, is still 204), and POST
// /v1/renew with the same body extends them by their lease_ttl from now
// for work that outlives it (an expired lease is not revived). The token carries
// the store keys, costs, lease id and limits (docs/SERVER.md has the
// format), so any instance sharing the store releases it and none keeps
// state per token. It is unsigned: what stops a caller from releasing
// another's slots is the random lease id, known only from one's own
// decide, and the engine (policy.Engine.ReleaseLeases) accepts only keys
// it builds for concurrency limits, so a forged token cannot reach other
// state. Envoy's protocol, and so gRPC and /json, has no release: there,
// slots return at lease_ttl.
//
// # Input
//
// Every request is validated before any store call: a domain, at least one
// descriptor, non-empty keys, valid UTF-8, messages and bodies of at most
// 1 MiB (a JSON content type over HTTP). /v1 also bounds a request (Limits:
// 64 descriptors of 1 to 16 entries, keys and values of at most 1024
// bytes); the Envoy APIs do not, as envoyproxy/ratelimit does not: Envoy
// fails open on a call that errs, which would let a long value escape every
// limit of its request. Bad input is 400 (415, 413, 405 where they apply;
// INVALID_ARGUMENT over gRPC) with a message that says what and where; the
// decoders are fuzzed.
//
// # Lifecycle
//
// Serve runs until its context is done, then drains: health turns
// NOT_SERVING, listeners close, requests in flight finish within the drain
// timeout, and Serve returns nil. A health Watch call, which never ends on
// its own, ends (status OK) once it has sent the drain's NOT_SERVING, so
// that a client watching health does not hold the drain. Readiness pings the store every second
// (and at each /readyz), each ping within 1 s: once the store has
// answered, /readyz turns 503 after 3 failed pings in a row and 200 again
// at the first that succeeds (WithReadiness). The ping reaches one node of
// a store with a breaker per node (a Redis Cluster, a memcached ring), so
// one dead node of many leaves /readyz as that node's answer; its body
// counts and names the open breakers either way, and a 503 says how many
// other nodes' breakers are closed.
package server
