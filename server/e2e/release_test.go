package e2e

import (
	"encoding/base64"
	binenc "encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/testserver"
)

// TestReleaseAcrossInstances: two floodgate processes share one Redis; a
// lease taken through one instance's /v1/decide is released through the
// other's /v1/release, and its slot is free for both. A forged token that
// names a rate limit's key is refused and leaves that key's state alone.
// That limit is 1 a day: a fixed window on Redis' clock, whose end between
// the first and the last decide would admit the last one.
func TestReleaseAcrossInstances(t *testing.T) {
	url := "redis://" + testserver.Redis(t)
	domain := uniqueDomain("release")
	config := fmt.Sprintf(`
domain: %s
descriptors:
  - key: job
    rate_limit: {name: inflight, algorithm: concurrency, requests_per_unit: 2, lease_ttl: 1m}
  - key: user
    rate_limit: {name: per-user, unit: day, requests_per_unit: 1}
`, domain)
	a := "http://" + start(t, config, "--store", url).http
	b := "http://" + start(t, config, "--store", url).http

	decide := func(base, key, value string, want int) string {
		t.Helper()
		body := fmt.Sprintf(`{"domain":%q,"descriptors":[{"entries":[{"key":%q,"value":%q}]}]}`, domain, key, value)
		code, _, got := post(t, base+"/v1/decide", body)
		var out struct{ Lease string }
		json.Unmarshal([]byte(got), &out)
		if code != want || (code == 200 && key == "job") != (out.Lease != "") {
			t.Fatalf("decide %s=%s on %s: %d %s, want %d (with a lease when a job is admitted)", key, value, base, code, got, want)
		}
		return out.Lease
	}
	release := func(base, body string, want int) string {
		t.Helper()
		code, _, got := post(t, base+"/v1/release", body)
		if code != want {
			t.Fatalf("release %s on %s: %d %s, want %d", body, base, code, got, want)
		}
		return got
	}

	first := decide(a, "job", "export", 200)
	decide(a, "job", "export", 200)
	decide(b, "job", "export", 429)
	release(b, `{"lease":"`+first+`"}`, 204)
	decide(b, "job", "export", 200)
	release(a, `{"lease":"`+first+`"}`, 204) // again, on the other instance
	decide(a, "job", "export", 429)
	decide(b, "job", "export", 429)

	// A token rebuilt with the key of the exhausted per-user limit (its
	// lease id is no secret here): refused before Redis sees it.
	decide(a, "user", "u", 200)
	decide(b, "user", "u", 429)
	raw, err := base64.RawURLEncoding.DecodeString(first)
	if err != nil {
		t.Fatal(err)
	}
	key := string(raw[3 : 3+int(raw[2])])
	rateKey := strings.Replace(key, "job=export#concurrency:0", "user=u#fixed_window:86400000000", 1)
	forged := append([]byte{1, 1, byte(len(rateKey))}, rateKey...)
	forged = append(forged, raw[3+len(key):len(raw)-4]...) // cost, id, limit, TTL
	forged = binenc.BigEndian.AppendUint32(forged, crc32.ChecksumIEEE(forged))
	got := release(b, `{"lease":"`+base64.RawURLEncoding.EncodeToString(forged)+`"}`, 400)
	if !strings.Contains(got, "not a concurrency limit") {
		t.Fatalf("forged release: %s, want a message that the key is not a concurrency limit's", got)
	}
	decide(a, "user", "u", 429)
}
