package server_test

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/policy"
)

// TestMemcachedMetrics: a server on memcached (under the failure policy,
// as serve builds it) exports the store's counters, so that a hot key's
// compare-and-swap retries and give-ups show on /metrics; before, they
// showed only in log lines.
func TestMemcachedMetrics(t *testing.T) {
	addr := testserver.Memcached(t)
	if addr == "" {
		return
	}
	in := newMCInstance(t, addr)
	run := fmt.Sprint(time.Now().UnixNano())
	for _, key := range []string{"tb", "fw"} {
		for range 3 {
			if _, err := in.eng.Decide(t.Context(), policy.Request{Domain: "mc", Descriptors: []policy.Descriptor{{Entries: []policy.Entry{{Key: key, Value: run}}}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	resp, err := http.Get(in.admin.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for name, least := range map[string]float64{
		"floodgate_memcached_cas_ops_total":     3,
		"floodgate_memcached_counter_ops_total": 3,
		"floodgate_memcached_cas_retries_total": 0,
		"floodgate_memcached_contention_total":  0,
		"floodgate_memcached_rollbacks_total":   0,
	} {
		m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindSubmatch(b)
		if m == nil {
			t.Errorf("/metrics lacks %s", name)
			continue
		}
		if v, _ := strconv.ParseFloat(string(m[1]), 64); v < least {
			t.Errorf("%s = %v, want at least %v", name, v, least)
		}
	}
}
