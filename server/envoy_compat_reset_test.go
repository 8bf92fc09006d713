package server_test

import (
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/server"
)

const resetConfig = `
domain: r
descriptors:
  - key: sec
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: min
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: month
    rate_limit: {unit: month, requests_per_unit: 5}
  - key: sliding
    rate_limit: {algorithm: sliding_window, unit: minute, requests_per_unit: 5}
  - key: bucket
    rate_limit: {algorithm: token_bucket, unit: minute, requests_per_unit: 60}
  - key: banned
    rate_limit: {unit: hour, requests_per_unit: 0}
`

// TestEnvoyDurationUntilResetWholeSeconds: duration_until_reset is whole
// seconds, rounded up, at least 1 s whenever something resets, and sent
// with every current_limit — as envoyproxy/ratelimit answers it (1 to the
// unit's length) and as Envoy reads it (X-RateLimit-Reset takes its
// seconds). Before, a second-long window answered fractions such as 0.70s
// (Envoy's X-RateLimit-Reset: 0 every time), and a check on a fresh key
// (hits_addend 0) or a cost above the limit left it out. A full bucket
// resets nothing: 0 s, sent.
func TestEnvoyDurationUntilResetWholeSeconds(t *testing.T) {
	for name, e := range storeEnvs(t, resetConfig, server.WithEnvoyHeaders(true)) {
		t.Run(name, func(t *testing.T) {
			awayFromMinuteEnd(name)
			for _, viaJSON := range []bool{false, true} {
				v := transport(viaJSON)
				for _, tc := range []struct {
					what    string
					key     string
					cost    *uint64 // per-descriptor hits_addend; nil: 1
					lo, hi  int64   // duration_until_reset in [lo, hi] s
					overall rlsv3.RateLimitResponse_Code
				}{
					{"a second-long window", "sec", nil, 1, 1, rlsv3.RateLimitResponse_OK},
					{"again", "sec", nil, 1, 1, rlsv3.RateLimitResponse_OK},
					{"a check on a fresh minute", "min", u64(0), 1, 60, rlsv3.RateLimitResponse_OK},
					{"a cost above the limit on a fresh minute", "min-big", u64(6), 1, 60, rlsv3.RateLimitResponse_OVER_LIMIT},
					{"a request on the minute", "min", nil, 1, 60, rlsv3.RateLimitResponse_OK},
					{"a cost above the limit on a used minute", "min", u64(6), 1, 60, rlsv3.RateLimitResponse_OVER_LIMIT},
					{"the minute, spent by that cost", "min", u64(0), 1, 60, rlsv3.RateLimitResponse_OVER_LIMIT},
					{"a check on a fresh month", "month", u64(0), 1, 31 * 24 * 3600, rlsv3.RateLimitResponse_OK},
					{"a check on a fresh sliding window", "sliding", u64(0), 60, 60, rlsv3.RateLimitResponse_OK},
					{"a check on a full bucket", "bucket", u64(0), 0, 0, rlsv3.RateLimitResponse_OK},
					{"a request on the bucket", "bucket", nil, 1, 1, rlsv3.RateLimitResponse_OK},
					{"a requests_per_unit: 0 rule", "banned", nil, 1, 3600, rlsv3.RateLimitResponse_OVER_LIMIT},
				} {
					key, val := tc.key, v
					if key == "min-big" {
						key, val = "min", v+"-big"
					}
					req := usage(key, val, tc.cost, 0)
					req.Domain = "r"
					b, _ := protojson.Marshal(req)
					resp := &rlsv3.RateLimitResponse{}
					var raw string
					var hdr map[string]string
					if viaJSON {
						code, body, _ := do(t, "POST", e.http.URL+"/json", "application/json", b)
						if code != http.StatusOK && code != http.StatusTooManyRequests {
							t.Fatalf("/json: %d %s", code, body)
						}
						raw = string(body)
						if err := protojson.Unmarshal(body, resp); err != nil {
							t.Fatal(err)
						}
					} else {
						resp, _ = e.ask(t, req, false)
					}
					hdr = map[string]string{}
					for _, h := range resp.ResponseHeadersToAdd {
						hdr[h.Key] = h.Value
					}
					st := resp.Statuses[0]
					d := st.DurationUntilReset
					if resp.OverallCode != tc.overall || st.CurrentLimit == nil {
						t.Fatalf("%s: %s: %v, want %v with a current_limit", v, tc.what, resp, tc.overall)
					}
					if d == nil || d.Nanos != 0 || d.Seconds < tc.lo || d.Seconds > tc.hi {
						t.Errorf("%s: %s: duration_until_reset %v, want whole seconds in [%d, %d]", v, tc.what, d, tc.lo, tc.hi)
						continue
					}
					// /json renders it as protojson does: "60s", no
					// fraction, "0s" included.
					if viaJSON {
						m := regexp.MustCompile(`"durationUntilReset":\s*"([0-9.]+)s"`).FindStringSubmatch(raw)
						if m == nil || m[1] != strconv.FormatInt(d.Seconds, 10) {
							t.Errorf("/json: %s: body %s, want \"durationUntilReset\": \"%ds\"", tc.what, raw, d.Seconds)
						}
					}
					// The header fields tell of the same reset (a window's
					// refusal waits as long as it resets).
					if got, ok := hdr["X-RateLimit-Reset"]; ok && got != strconv.FormatInt(d.Seconds, 10) {
						t.Errorf("%s: %s: X-RateLimit-Reset %s, duration_until_reset %ds: they disagree", v, tc.what, got, d.Seconds)
					}
				}
			}
		})
	}
}

// TestEnvoyResetNeverZeroOnASecondWindow: with the real clock, a
// second-long window answered fractions below one second, which Envoy
// reads as X-RateLimit-Reset: 0; every answer is now 1 s.
func TestEnvoyResetNeverZeroOnASecondWindow(t *testing.T) {
	for name, e := range storeEnvs(t, resetConfig) {
		t.Run(name, func(t *testing.T) {
			for i := range 5 {
				req := usage("sec", "real", nil, 0)
				req.Domain = "r"
				req.Descriptors[0].HitsAddend = wrapperspb.UInt64(1)
				resp, _ := e.ask(t, req, i%2 == 1)
				if d := resp.Statuses[0].DurationUntilReset; d.GetSeconds() != 1 || d.GetNanos() != 0 {
					t.Fatalf("call %d: duration_until_reset %v, want 1s", i+1, d)
				}
				time.Sleep(130 * time.Millisecond)
			}
		})
	}
}
