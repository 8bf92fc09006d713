// Package bench compares Floodgate with its peers in the same run: the
// benchmarks live in _test.go files, one file per scenario family, named
// Benchmark<Scenario>/<contender>.
//
// It is a module of its own (github.com/floodgate/floodgate/bench, with a
// replace of the main module by ../) so that the peers it imports —
// golang.org/x/time/rate, go.uber.org/ratelimit and later Redis and gRPC
// clients — never enter the main module's dependencies. Because it is a
// separate module, `go test ./...` from the repository root does not reach
// it; run it from this folder or with `make bench-peers`:
//
//	cd bench && go test -run '^$' -bench . -benchmem ./...
//
// # Scenario families
//
//   - singlekey_test.go: one limiter, serial and parallel
//     (SingleKeySerial, SingleKeyParallel, SingleKeySerialDenied).
//   - keys_test.go: one limiter per key over 10 000 and 1 000 000 keys in
//     parallel (Keys10kParallel, Keys1mParallel), with the heap each key
//     costs (B/key).
//
// Contenders use limits that never refuse (unless the scenario is about
// refusals), so that each does the same admitted work; bench_test.go holds
// the shared parameters. To add a family, add a file with its own
// Benchmark<Scenario> functions and a section in docs/BENCHMARKS.md.
package bench
