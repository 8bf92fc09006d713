package server_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/server"
	"github.com/floodgate/floodgate/store/redis"
)

// usageConfig is Envoy Gateway's token budget: 1000 tokens per minute,
// checked with hits_addend 0 before a request and charged the usage the
// response reports (apply_on_stream_done) after it.
const usageConfig = `
domain: ai
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: model
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: sliding_window
    rate_limit: {algorithm: sliding_window, unit: minute, requests_per_unit: 1000}
  - key: sliding_log
    rate_limit: {algorithm: sliding_log, unit: minute, requests_per_unit: 1000}
  - key: token_bucket
    rate_limit: {algorithm: token_bucket, unit: minute, requests_per_unit: 1000}
  - key: gcra
    rate_limit: {algorithm: gcra, unit: minute, requests_per_unit: 1000}
  - key: concurrency
    rate_limit: {algorithm: concurrency, requests_per_unit: 1000, lease_ttl: 1m}
  - key: quiet
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1000}
`

// storeEnvs returns the server over the memory store and, when a Redis is
// at hand (scripts/with-servers.sh, or redis-server on the PATH), over
// Redis, under a key prefix of its own.
func storeEnvs(t *testing.T, yaml string, opts ...server.Option) map[string]*env {
	t.Helper()
	cfg, err := policy.Parse("compat.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	envs := map[string]*env{"memory": newEnvWith(t, cfg, nil, opts...)}
	addr := testserver.Redis(t)
	if addr == "" {
		t.Log("no Redis: memory store only")
		return envs
	}
	st, err := redis.Open("redis://"+addr, redis.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	prefix := fmt.Sprintf("fgtest-%s-%d:", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano())
	eng, err := policy.NewEngine(cfg, st, policy.WithKeyPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(eng, st, opts...)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{srv: srv, eng: eng}
	e.http = httptest.NewServer(srv.HTTPHandler())
	e.admin = httptest.NewServer(srv.AdminHandler())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.GRPCServer().Serve(ln)
	e.conn, err = grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	e.rls = rlsv3.NewRateLimitServiceClient(e.conn)
	t.Cleanup(func() {
		e.conn.Close()
		srv.GRPCServer().Stop()
		e.http.Close()
		e.admin.Close()
	})
	envs["redis"] = e
	return envs
}

// awayFromMinuteEnd waits, on a store that reads the real clock, until a
// minute-long window has at least 10 s left, so that a test's calls share
// one window.
func awayFromMinuteEnd(name string) {
	if name == "memory" {
		return // the test clock stands still
	}
	if left := time.Minute - time.Duration(time.Now().UnixNano())%time.Minute; left < 10*time.Second {
		time.Sleep(left + 50*time.Millisecond)
	}
}

// usage is a one-descriptor request on key=value whose descriptor carries
// hits_addend cost (nil: the request's hits_addend, reqHits, applies).
func usage(key, value string, cost *uint64, reqHits uint32) *rlsv3.RateLimitRequest {
	r := envoyReq("ai", reqHits, []string{key, value})
	if cost != nil {
		r.Descriptors[0].HitsAddend = wrapperspb.UInt64(*cost)
	}
	return r
}

func u64(v uint64) *uint64 { return &v }

// TestEnvoyUsageBeyondWhatRemains: a usage report larger than what remains
// exhausts the key, as envoyproxy/ratelimit's INCRBY does, so that the
// next check (hits_addend 0) and the next request are OVER_LIMIT with 0
// left — on the memory store and on Redis, over gRPC and /json. Before,
// the report was refused and charged nothing: the next check answered OK
// with 1000 left, and a client whose reports exceed what remains was never
// limited.
func TestEnvoyUsageBeyondWhatRemains(t *testing.T) {
	for name, e := range storeEnvs(t, usageConfig) {
		t.Run(name, func(t *testing.T) {
			awayFromMinuteEnd(name)
			n := 0
			call := func(r *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
				t.Helper()
				n++
				resp, _ := e.ask(t, r, n%2 == 0)
				return resp
			}
			expect := func(what string, r *rlsv3.RateLimitRequest, code rlsv3.RateLimitResponse_Code, left uint32) {
				t.Helper()
				resp := call(r)
				if resp.OverallCode != code || resp.Statuses[0].Code != code || resp.Statuses[0].LimitRemaining != left {
					t.Errorf("%s: %v, want %v with %d left", what, resp, code, left)
				}
			}
			// Check, report 1200, check.
			expect("alice's check", usage("user", "alice", u64(0), 0), rlsv3.RateLimitResponse_OK, 1000)
			expect("alice's report of 1200", usage("user", "alice", u64(1200), 0), rlsv3.RateLimitResponse_OVER_LIMIT, 0)
			expect("alice's next check", usage("user", "alice", u64(0), 0), rlsv3.RateLimitResponse_OVER_LIMIT, 0)
			expect("alice's next request", usage("user", "alice", nil, 0), rlsv3.RateLimitResponse_OVER_LIMIT, 0)
			// Reports of 200 then 900.
			expect("bob's report of 200", usage("user", "bob", u64(200), 0), rlsv3.RateLimitResponse_OK, 800)
			expect("bob's report of 900", usage("user", "bob", u64(900), 0), rlsv3.RateLimitResponse_OVER_LIMIT, 0)
			expect("bob's next check", usage("user", "bob", u64(0), 0), rlsv3.RateLimitResponse_OVER_LIMIT, 0)
			// The request's hits_addend, no descriptor's.
			expect("carol's report of 200", usage("user", "carol", nil, 200), rlsv3.RateLimitResponse_OK, 800)
			expect("carol's request-level report of 900", usage("user", "carol", nil, 900), rlsv3.RateLimitResponse_OVER_LIMIT, 0)
			expect("carol's next check", usage("user", "carol", u64(0), 0), rlsv3.RateLimitResponse_OVER_LIMIT, 0)
			// Every window and bucket.
			for _, k := range []string{"sliding_window", "sliding_log", "token_bucket", "gcra"} {
				expect(k+": a report of 200", usage(k, "dan", u64(200), 0), rlsv3.RateLimitResponse_OK, 800)
				expect(k+": a report of 900", usage(k, "dan", u64(900), 0), rlsv3.RateLimitResponse_OVER_LIMIT, 0)
				expect(k+": the next check", usage(k, "dan", u64(0), 0), rlsv3.RateLimitResponse_OVER_LIMIT, 0)
			}
			// Concurrency is not charged what remains (slots would be
			// held), nor a shadow rule (its refusal is OK, with 0 left as
			// envoyproxy/ratelimit answers a shadow rule over its limit;
			// the check after it finds the whole limit).
			expect("concurrency: 900", usage("concurrency", "eve", u64(900), 0), rlsv3.RateLimitResponse_OK, 100)
			expect("concurrency: 200", usage("concurrency", "eve", u64(200), 0), rlsv3.RateLimitResponse_OVER_LIMIT, 0)
			expect("concurrency: a check", usage("concurrency", "eve", u64(0), 0), rlsv3.RateLimitResponse_OK, 100)
			expect("shadow: 1200", usage("quiet", "eve", u64(1200), 0), rlsv3.RateLimitResponse_OK, 0)
			expect("shadow: a check", usage("quiet", "eve", u64(0), 0), rlsv3.RateLimitResponse_OK, 1000)
		})
	}
}

// TestEnvoyUsageBeyondWhatRemainsChargesThatDescriptorOnly: in a request of
// two descriptors, the one whose cost exceeds what remains is charged what
// remains; the other, which would have passed, is charged nothing (all or
// nothing between descriptors, Floodgate's stated difference). And a check
// on a spent limit refuses the request it is in: what the request's other
// descriptors took is given back.
func TestEnvoyUsageBeyondWhatRemainsChargesThatDescriptorOnly(t *testing.T) {
	for name, e := range storeEnvs(t, usageConfig) {
		t.Run(name, func(t *testing.T) {
			awayFromMinuteEnd(name)
			left := func(key, value string, viaJSON bool) (rlsv3.RateLimitResponse_Code, uint32) {
				t.Helper()
				resp, _ := e.ask(t, usage(key, value, u64(0), 0), viaJSON)
				return resp.OverallCode, resp.Statuses[0].LimitRemaining
			}
			for _, viaJSON := range []bool{false, true} {
				v := transport(viaJSON)
				if resp, _ := e.ask(t, usage("user", v, u64(800), 0), viaJSON); resp.OverallCode != rlsv3.RateLimitResponse_OK {
					t.Fatalf("%s: 800 of 1000: %v", v, resp)
				}
				two := envoyReq("ai", 300, []string{"user", v}, []string{"model", v})
				resp, _ := e.ask(t, two, viaJSON)
				if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT ||
					resp.Statuses[1].Code != rlsv3.RateLimitResponse_OK || resp.Statuses[1].LimitRemaining != 1000 {
					t.Fatalf("%s: 300 on user (200 left) and model: %v, want OVER_LIMIT, user OVER_LIMIT, model OK with 1000 left (nothing charged)", v, resp)
				}
				if code, n := left("user", v, viaJSON); code != rlsv3.RateLimitResponse_OVER_LIMIT || n != 0 {
					t.Errorf("%s: user after the overflow: %v with %d left, want OVER_LIMIT with 0 (charged what remained)", v, code, n)
				}
				if code, n := left("model", v, viaJSON); code != rlsv3.RateLimitResponse_OK || n != 1000 {
					t.Errorf("%s: model after the overflow: %v with %d left, want OK with 1000 (not charged)", v, code, n)
				}
				// A check on the spent user beside a charge on model.
				mixed := envoyReq("ai", 50, []string{"user", v}, []string{"model", v})
				mixed.Descriptors[0].HitsAddend = wrapperspb.UInt64(0)
				resp, code := e.ask(t, mixed, viaJSON)
				if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT ||
					(viaJSON && code != http.StatusTooManyRequests) {
					t.Errorf("%s: a check on the spent user and 50 on model: %v (%d), want OVER_LIMIT", v, resp, code)
				}
				if code, n := left("model", v, viaJSON); code != rlsv3.RateLimitResponse_OK || n != 1000 {
					t.Errorf("%s: model after a request the spent check refused: %v with %d left, want OK with 1000 (given back)", v, code, n)
				}
			}
		})
	}
}

// TestV1KeepsRefusalsFree: /v1 (and the library) keep "a refused request
// charges nothing": a cost above what remains is refused and the key keeps
// what it had.
func TestV1KeepsRefusalsFree(t *testing.T) {
	e := storeEnvs(t, usageConfig)["memory"]
	post := func(hits int) (int, string) {
		t.Helper()
		code, body, _ := do(t, "POST", e.http.URL+"/v1/decide", "application/json",
			[]byte(fmt.Sprintf(`{"domain":"ai","hits":%d,"descriptors":[{"entries":[{"key":"user","value":"v1"}]}]}`, hits)))
		return code, string(body)
	}
	if code, body := post(1200); code != http.StatusTooManyRequests {
		t.Fatalf("/v1/decide of 1200 on 1000: %d %s, want 429", code, body)
	}
	if code, body := post(1000); code != http.StatusOK {
		t.Errorf("/v1/decide of 1000 after a refused 1200: %d %s, want 200 (the refusal charged nothing)", code, body)
	}
}
