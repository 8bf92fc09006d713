package main

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/store/memory"
)

// TestEvictionWatchSteps: the WARN comes at the first poll that finds
// evictions, then at most once a minute, each time with the evictions
// since the one before; none without new evictions.
func TestEvictionWatchSteps(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	w := &evictionWatch{store: "--store"}
	for _, step := range []struct {
		at        time.Duration
		evictions int64
		want      string // "" for no WARN
	}{
		{0, 0, ""},
		{2 * time.Second, 5, "evicted 5 live keys since start"},
		{4 * time.Second, 9, ""}, // within the minute
		{60 * time.Second, 9, ""},
		{62 * time.Second, 9, "evicted 4 live keys in the last 1m0s"},
		{130 * time.Second, 9, ""}, // nothing new
		{140 * time.Second, 10, "evicted 1 live key in the last 1m18s"},
		{142 * time.Second, 10, ""},
	} {
		msg, ok := w.check(memory.Stats{Evictions: step.evictions, MaxKeys: 10}, t0.Add(step.at))
		switch {
		case step.want == "" && ok:
			t.Errorf("t0+%v, %d evictions: WARN %q, want none", step.at, step.evictions, msg)
		case step.want != "" && (!ok || !strings.Contains(msg, step.want)):
			t.Errorf("t0+%v, %d evictions: WARN %q (%v), want one saying %q", step.at, step.evictions, msg, ok, step.want)
		}
	}
}

const evictionConfig = `domain: app
descriptors:
  - key: user
    rate_limit: {name: per-user, algorithm: sliding_log, period: 1h, requests_per_unit: 5}
`

// evictionWarning is the memory store eviction WARN, its count captured.
var evictionWarning = regexp.MustCompile(`level=WARN msg="--store: the memory store evicted (\d+) live keys since start, their limits' windows not over, to stay under its cap of 10 keys: each restarts with a fresh budget`)

// TestServeWarnsOfMemoryEvictions: a memory store capped below the working
// set (max_keys=10, 100 users) evicts keys whose sliding logs are still
// counting, and each comes back with a fresh budget: 7 requests of each
// user against a limit of 5 were all admitted. Only floodgate_memory_evictions_total said
// so; now serve logs one WARN with the count (no more than the metric's),
// and not another for a second burst within the minute. Under the default
// cap the same requests evict nothing, and there is no WARN.
func TestServeWarnsOfMemoryEvictions(t *testing.T) {
	dir, _ := writeConfig(t, evictionConfig)
	burst := func(t *testing.T, addr string) (admitted int) {
		t.Helper()
		for round := range 7 {
			for u := range 100 {
				body := fmt.Sprintf(`{"domain":"app","descriptors":[{"entries":[{"key":"user","value":"u%d"}]}]}`, u)
				resp, err := http.Post("http://"+addr+"/json", "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatalf("round %d, user %d: %v", round, u, err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch {
				case resp.StatusCode == http.StatusOK && strings.Contains(string(b), `"overallCode":"OK"`):
					admitted++
				case resp.StatusCode == http.StatusTooManyRequests || strings.Contains(string(b), `"overallCode":"OVER_LIMIT"`):
				default:
					t.Fatalf("round %d, user %d: %d %s", round, u, resp.StatusCode, b)
				}
			}
		}
		return admitted
	}
	// Longer than two polls: a WARN due would have been said.
	settle := 2*evictionPoll + time.Second

	t.Run("capped", func(t *testing.T) {
		p := startBinary(t, nil, "--config", dir, "--store", "memory://?max_keys=10")
		// Each key is evicted before it comes back, so more than its 5
		// pass (all 7, most often).
		if n := burst(t, p.HTTP); n <= 500 {
			t.Errorf("%d of 700 admitted with max_keys=10: want the evictions' over-admission, more than 500", n)
		}
		deadline := time.Now().Add(settle)
		for !evictionWarning.MatchString(p.Stderr()) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond) // waiting for the poll, not for math
		}
		m := evictionWarning.FindStringSubmatch(p.Stderr())
		if m == nil {
			t.Fatalf("no eviction WARN within %v of the burst:\n%s", settle, p.Stderr())
		}
		warned, _ := strconv.ParseInt(m[1], 10, 64)
		evicted := metricValue(t, p.Admin, "floodgate_memory_evictions_total")
		if warned < 1 || float64(warned) > evicted {
			t.Errorf("the WARN counts %d evictions, the metric %v: want 1 to the metric's", warned, evicted)
		}
		burst(t, p.HTTP)
		time.Sleep(settle) // two more polls, within the minute
		if n := strings.Count(p.Stderr(), "the memory store evicted"); n != 1 {
			t.Errorf("%d eviction WARNs after two bursts within a minute, want 1:\n%s", n, p.Stderr())
		}
	})
	t.Run("uncapped", func(t *testing.T) {
		p := startBinary(t, nil, "--config", dir)
		if n := burst(t, p.HTTP); n != 500 {
			t.Errorf("%d of 700 admitted under the default cap, want 500 (5 per user)", n)
		}
		time.Sleep(settle)
		if strings.Contains(p.Stderr(), "the memory store evicted") {
			t.Errorf("no eviction, and a WARN all the same:\n%s", p.Stderr())
		}
	})
}

// metricValue reads the value of an unlabelled series from the admin
// listener's /metrics.
func metricValue(t *testing.T, admin, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no %s in /metrics:\n%s", name, b)
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
