// Package loadgen is the load generator behind `floodgate bench`: it sends
// rate limit requests to a running floodgate server (gRPC ShouldRateLimit,
// HTTP /json or the native /v1/decide), or plain HTTP requests to a URL
// (protocol HTTP: a floodgate gateway, a service behind the middleware),
// from a number of concurrent callers over a number of connections, bounded
// by a request count and a duration, and reports admitted and rejected
// counts, errors, answers per second and a latency histogram. In HTTP mode
// 2xx and 3xx answers are admitted, the refused statuses (default 429)
// rejected, and any other status is an error.
//
// Every run is bounded: it stops after Requests requests or after Duration,
// whichever comes first (at least one of them must be set), or when its
// context is done, or, with Config.DownAfter, early when the server is
// gone; Result.Stop says which, and the report's "ended" line.
// The callers share exactly Connections connections. Probe checks that
// the server can be reached at all before a run.
package loadgen
