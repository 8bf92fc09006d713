package metrics_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/metrics"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memcached"
	"github.com/floodgate/floodgate/store/memory"
	"github.com/floodgate/floodgate/store/resilient"
)

// TestNamesDocumented: every metric the server can export (each feature
// exercised once, so that every family has a series) is named, with its
// labels where the text gives them, in docs/SERVER.md's Metrics section
// and in this package's documentation, the two lists operators and
// dashboards are written from.
func TestNamesDocumented(t *testing.T) {
	m := metrics.New()
	m.MemoryStore(func() memory.Stats { return memory.Stats{} })
	m.MemcachedStore(func() memcached.Stats { return memcached.Stats{} })
	m.StoreSeries(resilient.FailOpen)
	m.GatewayUpstreamErrors()("connect")
	m.GatewayResponses()("", 200, true)
	m.SetBuildInfo("test")
	m.RateFactor("api", "r", 0.5)
	m.Decided("api", &policy.Response{PriorityUnknown: true, Statuses: []policy.Status{
		{Code: policy.CodeOK, Matched: true, Rule: "r", Shadow: true, Decision: algo.Decision{Allowed: true, Limit: 10, Remaining: 1}},
		{Code: policy.CodeOK, Matched: true, Rule: "s", Shadow: true, Decision: algo.Decision{Limit: 10}},
	}})
	m.Request("grpc", "OK", time.Millisecond)
	h := m.StoreHooks()
	h.Call("take", time.Millisecond, nil)
	h.CacheHit()
	m.ConfigLoaded()
	m.ConfigReloaded(true)
	m.Listener("http", 8, func() int64 { return 1 }, func() uint64 { return 1 }, func() uint64 { return 1 })
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	server, err := os.ReadFile("../docs/SERVER.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(server)
	if i := strings.Index(section, "### Metrics"); i >= 0 {
		section = section[i:]
		if j := strings.Index(section[4:], "\n#"); j >= 0 {
			section = section[:j+4]
		}
	} else {
		t.Fatal("docs/SERVER.md has no Metrics section")
	}
	pkgDoc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]string{"docs/SERVER.md's Metrics section": section, "metrics/doc.go": string(pkgDoc)}
	n := 0
	for _, f := range families {
		name, ok := strings.CutPrefix(f.GetName(), "floodgate_")
		if !ok {
			continue // the Go runtime's and the process's
		}
		n++
		var labels []string
		for _, l := range f.GetMetric()[0].GetLabel() {
			labels = append(labels, l.GetName())
		}
		for where, text := range docs {
			word := regexp.MustCompile(`(^|[^a-z_])` + name + `($|[^a-z_])`)
			loc := word.FindStringIndex(text)
			if loc == nil {
				t.Errorf("%s does not name %s (labels %v)", where, f.GetName(), labels)
				continue
			}
			// Where the text writes the labels (name{a,b}), they are the
			// metric's.
			for _, m := range regexp.MustCompile(`(^|[^a-z_])`+name+`\{([a-z_,]*)\}`).FindAllStringSubmatch(text, -1) {
				got := strings.Split(m[2], ",")
				slices.Sort(got)
				want := slices.Sorted(slices.Values(labels))
				if !slices.Equal(got, want) {
					t.Errorf("%s writes %s{%s}, but its labels are %v", where, name, m[2], want)
				}
			}
		}
	}
	if n < 25 {
		t.Errorf("only %d floodgate_ families gathered: the test no longer exercises every feature", n)
	}
}
