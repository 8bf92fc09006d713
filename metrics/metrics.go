package metrics

import (
	"net/http"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memcached"
	"github.com/floodgate/floodgate/store/memory"
	"github.com/floodgate/floodgate/store/region"
	"github.com/floodgate/floodgate/store/resilient"
)

// MaxSeries bounds the (domain, rule) label pairs given out first come,
// first served: the domains of no_rule decisions and, in a Metrics that does
// not know the configuration (no SetConfigSource), every rule name. Past it
// they count under "_other". The rules of the configuration in force, once
// known, are labelled whatever this budget holds.
const MaxSeries = 2000

// RequestLimitLabel is the rule label of the decisions on limits that
// requests carry (Envoy's per-descriptor limits, /v1's "limit") in a
// Metrics that knows the configuration (SetConfigSource). Such a limit is
// named after the descriptor's path with its values ("client_L17"): one
// name per value, which would take the series the configured rules need.
const RequestLimitLabel = "_request_limit"

// NearLimitRatio is the share of a limit above which an admitted decision
// counts as near the limit.
const NearLimitRatio = 0.8

// Outcomes of decisions_total.
const (
	OutcomeOK        = "ok"
	OutcomeOverLimit = "over_limit"
	OutcomeShadow    = "shadow_over_limit"
	OutcomeUnlimited = "unlimited"
	OutcomeNoRule    = "no_rule"
	// OutcomeFallbackOK and OutcomeFallbackRefused are the decisions the
	// store's failure policy (store/resilient, --on-store-error) made
	// instead of the store (policy.Response.StoreFallback): admitted, or
	// refused — by closed, or by local's share of the limit. They say
	// nothing of the limit's state, and are kept apart from ok and
	// over_limit so that a store outage under closed does not read as
	// clients hitting their limits.
	OutcomeFallbackOK      = "fallback_ok"
	OutcomeFallbackRefused = "fallback_refused"
)

// Metrics holds the server's collectors on a registry of its own.
type Metrics struct {
	reg *prometheus.Registry

	// memStats reads the memory store's figures (MemoryStore); nil until set.
	memStats atomic.Pointer[func() memory.Stats]
	// mcStats reads the memcached store's counters (MemcachedStore).
	mcStats atomic.Pointer[func() memcached.Stats]
	// regionStats reads the region store's figures (RegionStore).
	regionStats atomic.Pointer[func() region.Stats]

	decisions  *prometheus.CounterVec
	shadow     *prometheus.CounterVec
	nearLimit  *prometheus.CounterVec
	requests   *prometheus.CounterVec
	reqLatency *prometheus.HistogramVec
	storeLat   *prometheus.HistogramVec
	storeErrs  *prometheus.CounterVec
	fallbacks  *prometheus.CounterVec
	cacheHits  prometheus.Counter
	circuit    prometheus.Gauge
	// buildInfo is build_info{version,goversion}: 1 for the binary's
	// version (SetBuildInfo), no series before.
	buildInfo  *prometheus.GaugeVec
	openParts  prometheus.Gauge
	reloads    *prometheus.CounterVec
	lastReload prometheus.Gauge
	// reloadOK and reloadTime are config_last_reload_successful and
	// config_last_reload_timestamp_seconds.
	reloadOK   prometheus.Gauge
	reloadTime prometheus.Gauge
	factor     *prometheus.GaugeVec
	// upstreamErrs is gateway_upstream_errors_total, fed by
	// GatewayUpstreamErrors.
	upstreamErrs *prometheus.CounterVec
	// gwResponses is gateway_responses_total{code,by}, fed by
	// GatewayResponses.
	gwResponses *prometheus.CounterVec
	// prioUnknown is priority_unknown_total{domain}, fed by Decided.
	prioUnknown *prometheus.CounterVec

	// config returns the configuration in force (SetConfigSource); nil
	// until set. names is the set of its rule names, remade when config
	// returns another Config (a reload).
	config  atomic.Pointer[func() *policy.Config]
	names   atomic.Pointer[ruleNames]
	namesMu sync.Mutex

	mu     sync.RWMutex
	series map[[2]string]bool
	// live is the configuration the series were last pruned against
	// (prune), goneDomains the domains a reload removed that no later one
	// brought back, and factors the pairs of adaptive_rate_factor's
	// series. A series is made under mu's read lock and only if live and
	// goneDomains allow it, so a decision that races a reload cannot bring
	// back a series the reload deleted.
	live        *ruleNames
	goneDomains map[string]bool
	factors     map[[2]string]bool

	// rules caches, by (domain, rule), the pair's label and its children
	// of the per-rule counters: one lock-free map lookup per decision
	// instead of the series lock and a label lookup per counter. It holds
	// the pairs within MaxSeries; others holds each domain's "_other"
	// series, shared by the pairs past it.
	rules  sync.Map // [2]string → *ruleSeries
	others sync.Map // domain → *ruleSeries
	// requested holds each domain's RequestLimitLabel series, shared by
	// the rules named after requests.
	requested sync.Map // domain → *ruleSeries
	// noRule caches decisions_total{outcome="no_rule"} by domain, within
	// MaxSeries domains ("_other" past them).
	noRule sync.Map // string → prometheus.Counter
	// prioUnknownC caches priority_unknown_total by domain, within the
	// same MaxSeries domains as noRule ("_other" past them).
	prioUnknownC sync.Map // string → prometheus.Counter
	// reqs and reqLat cache the children of requests_total by (transport,
	// code) and of request_duration_seconds by transport.
	reqs   sync.Map // [2]string → prometheus.Counter
	reqLat sync.Map // string → prometheus.Observer
	// storeLatOp caches store_duration_seconds's children by operation.
	storeLatOp sync.Map // string → prometheus.Observer

	queueMu    sync.Mutex
	queueDepth func() int
}

// New returns Metrics registered on a new registry, with the Go runtime and
// process collectors.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), series: map[[2]string]bool{}, goneDomains: map[string]bool{}, factors: map[[2]string]bool{}}
	f := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "floodgate", Name: name, Help: help}, labels)
		m.reg.MustRegister(c)
		return c
	}
	m.decisions = f("decisions_total", "Descriptor decisions by domain, rule and outcome.", "domain", "rule", "outcome")
	m.shadow = f("shadow_decisions_total", "Refusals of shadow-mode rules that were not enforced.", "domain", "rule")
	m.nearLimit = f("near_limit_total", "Admitted decisions that left less than 20% of the limit.", "domain", "rule")
	m.prioUnknown = f("priority_unknown_total",
		"Decided requests whose priority class named none the domain declares, decided in its default class.", "domain")
	m.requests = f("requests_total", "Requests by transport and overall code.", "transport", "code")
	m.storeErrs = f("store_errors_total", "Store calls that failed, by operation.", "op")
	m.fallbacks = f("store_fallbacks_total", "Decisions made by the failure policy instead of the store.", "op", "policy")
	m.reloads = f("config_reloads_total", "Configuration reloads by result.", "result")
	m.upstreamErrs = f("gateway_upstream_errors_total",
		"Gateway mode: upstream failures by reason (connect, timeout, reset: connection closed or reset before the response was complete, other).", "reason")
	m.gwResponses = f("gateway_responses_total",
		"Gateway mode: responses by status code and by whom they were answered: upstream, or floodgate (a refusal, a bad request, an upstream failure).", "code", "by")
	// Both results from the start: an alert on increase(…[5m]) > 0 sees
	// the first failure only if the series was there at 0 before it.
	m.reloads.WithLabelValues(reloadSuccess)
	m.reloads.WithLabelValues(reloadFailure)
	lat := []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 200e-3, 250e-3, 1}
	// A wait-strategy request is answered when its turn comes, up to its
	// rule's max_wait (seconds): the request buckets go on to 10 s.
	reqLat := append(lat[:len(lat):len(lat)], 2.5, 5, 10)
	m.reqLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "floodgate", Name: "request_duration_seconds",
		Help: "Time to answer a request, by transport.", Buckets: reqLat}, []string{"transport"})
	m.storeLat = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "floodgate", Name: "store_duration_seconds",
		Help: "Store call latency by operation.", Buckets: lat}, []string{"op"})
	m.cacheHits = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "floodgate", Name: "over_limit_cache_hits_total",
		Help: "Refusals answered by the over-limit cache without a store call."})
	m.circuit = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "floodgate", Name: "circuit_state",
		Help: "Store circuit breaker: 0 closed, 1 open, 2 half-open; with a breaker per partition (Redis Cluster slot ranges, memcached servers), the worst: open if any is."})
	m.openParts = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "floodgate", Name: "circuit_open_partitions",
		Help: "Store circuit breakers open or half-open: partitions (Redis Cluster slot ranges, memcached servers) whose keys the failure policy answers."})
	m.lastReload = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "floodgate", Name: "config_last_reload_success_timestamp_seconds",
		Help: "When the configuration in force was loaded."})
	m.reloadOK = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "floodgate", Name: "config_last_reload_successful",
		Help: "Whether the last configuration reload succeeded (1) or failed (0, the previous configuration stays in force); 1 before any reload."})
	m.reloadOK.Set(1)
	m.reloadTime = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "floodgate", Name: "config_last_reload_timestamp_seconds",
		Help: "When the configuration was last loaded or a reload last attempted, successful or not."})
	m.factor = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "floodgate", Name: "adaptive_rate_factor",
		Help: "Rate factor an adaptive controller applies to a rule."}, []string{"domain", "rule"})
	m.buildInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "floodgate", Name: "build_info",
		Help: "Always 1: the version of floodgate (as floodgate version prints it) and of Go the binary was built with."}, []string{"version", "goversion"})
	queue := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "floodgate", Name: "queue_depth",
		Help: "Requests waiting in wait-strategy queues."}, func() float64 { return float64(m.QueueDepth()) })
	m.reg.MustRegister(m.reqLatency, m.storeLat, m.cacheHits, m.circuit, m.openParts, m.lastReload, m.reloadOK, m.reloadTime, m.factor, m.buildInfo, queue,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry returns the registry, to add collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// MemoryStore registers the embedded store's figures, read from stats at
// each scrape: floodgate_memory_keys, floodgate_memory_evictions_total
// (keys pushed out by the key cap before their state expired: each one
// starts afresh if it comes back) and floodgate_memory_expired_total. Call
// it for a server on the memory store; a later call replaces the store
// read.
func (m *Metrics) MemoryStore(stats func() memory.Stats) {
	if m.memStats.Swap(&stats) != nil {
		return // registered by the first call, which reads memStats
	}
	read := func() memory.Stats { return (*m.memStats.Load())() }
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "floodgate", Name: "memory_keys",
			Help: "Keys the embedded memory store holds."}, func() float64 { return float64(read().Keys) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "floodgate", Name: "memory_max_keys",
			Help: "The memory store's key cap (max_keys; 0: none): past it, new keys evict old ones."}, func() float64 { return float64(read().MaxKeys) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "floodgate", Name: "memory_evictions_total",
			Help: "Keys the memory store's key cap removed before their state expired."}, func() float64 { return float64(read().Evictions) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "floodgate", Name: "memory_expired_total",
			Help: "Keys the memory store removed because their state had expired."}, func() float64 { return float64(read().Expired) }),
	)
}

// MemcachedStore exports the memcached store's counters: operations on
// window counters and on compare-and-swap state, CAS attempts lost to a
// concurrent writer (a hot key), operations that ran out of retries
// (refused by the failure policy, nothing charged) and charges rolled
// back. Like MemoryStore, the first call registers them and a later one
// only changes the source.
func (m *Metrics) MemcachedStore(stats func() memcached.Stats) {
	if m.mcStats.Swap(&stats) != nil {
		return
	}
	read := func() memcached.Stats { return (*m.mcStats.Load())() }
	c := func(name, help string, v func(memcached.Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "floodgate", Name: name, Help: help},
			func() float64 { return float64(v(read())) })
	}
	m.reg.MustRegister(
		c("memcached_counter_ops_total", "Decisions, refunds and roll-backs on memcached window counters.",
			func(s memcached.Stats) uint64 { return s.CounterOps }),
		c("memcached_cas_ops_total", "Operations on memcached compare-and-swap state that completed.",
			func(s memcached.Stats) uint64 { return s.CASOps }),
		c("memcached_cas_retries_total", "Compare-and-swap attempts lost to a concurrent writer and tried again (hot keys).",
			func(s memcached.Stats) uint64 { return s.CASRetries }),
		c("memcached_contention_total", "Operations that ran out of compare-and-swap retries: refused, nothing charged, whatever the failure policy.",
			func(s memcached.Stats) uint64 { return s.Contention }),
		c("memcached_rollbacks_total", "Charges undone on memcached: refused counter increments and refunded keys of refused multi-key takes.",
			func(s memcached.Stats) uint64 { return s.Rollbacks }),
	)
}

// RegionStore exports the figures of a store of several regions
// (store/region): decisions a peer region lent (region_borrowed_total),
// peer calls that failed and left the peer out for the backoff
// (region_peer_failures_total), and each peer region's state
// (region_peer_up{peer}: 0 from a failed call until one answers). Like MemoryStore, the
// first call registers them, with the peers it reads then, and a later one
// only changes the source.
func (m *Metrics) RegionStore(stats func() region.Stats) {
	if m.regionStats.Swap(&stats) != nil {
		return
	}
	read := func() region.Stats { return (*m.regionStats.Load())() }
	cs := []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "floodgate", Name: "region_borrowed_total",
			Help: "Decisions this region's share refused and a peer region admitted."}, func() float64 { return float64(read().Borrowed) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "floodgate", Name: "region_prefetches_total",
			Help: "Rounds of borrowing ahead (--region-prefetch) that left a slice of a key held here."}, func() float64 { return float64(read().Prefetches) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "floodgate", Name: "region_peer_failures_total",
			Help: "Calls to a peer region's store that failed or timed out; each leaves the peer out for the backoff."}, func() float64 { return float64(read().PeerFailures) }),
	}
	for _, p := range stats().Peers {
		name := p.Name
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "floodgate", Name: "region_peer_up",
			Help:        "1 while the peer region answers, 0 from a failed call to it until a borrowing or a probe (every second) answers; this region limits on its share without it meanwhile.",
			ConstLabels: prometheus.Labels{"peer": name}}, func() float64 {
			for _, q := range read().Peers {
				if q.Name == name && q.Down {
					return 0
				}
			}
			return 1
		}))
	}
	m.reg.MustRegister(cs...)
}

// Listener exports a listener's connections, read at each scrape:
// connections_open{listener} (accepted and not yet closed),
// connections_full_total{listener} (new connections that found the
// listener holding its --max-connections and waited for one to close) and,
// connections_idle_closed_total{listener} (idle keep-alive connections a
// full listener closed to make room) and, when max > 0,
// connections_max{listener}. Call it once per listener name.
func (m *Metrics) Listener(name string, max int, open func() int64, full, reaped func() uint64) {
	l := prometheus.Labels{"listener": name}
	cs := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "floodgate", Name: "connections_open", ConstLabels: l,
			Help: "Connections the listener accepted that are not closed yet."}, func() float64 { return float64(open()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "floodgate", Name: "connections_full_total", ConstLabels: l,
			Help: "Times the listener held its --max-connections and a new connection waited in the listen backlog for one to close."},
			func() float64 { return float64(full()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "floodgate", Name: "connections_idle_closed_total", ConstLabels: l,
			Help: "Idle keep-alive connections the listener closed, holding its --max-connections, to make room for a new one."},
			func() float64 { return float64(reaped()) }),
	}
	if max > 0 {
		cs = append(cs, prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "floodgate", Name: "connections_max", ConstLabels: l,
			Help: "The most connections the listener holds open at once (--max-connections)."}))
		cs[len(cs)-1].(prometheus.Gauge).Set(float64(max))
	}
	m.reg.MustRegister(cs...)
}

// Handler serves the metrics in the Prometheus exposition formats. A
// scrape first catches up with a reload no decision has seen yet: the
// series of the rules and domains it removed are not served.
func (m *Metrics) Handler() http.Handler {
	h := promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.ruleNames()
		h.ServeHTTP(w, r)
	})
}

// UnknownDomain is the domain label under which the server counts the
// decisions of domains its configuration does not have: a request may name
// any domain, and each would otherwise be a series of its own (taking the
// MaxSeries room the configured rules need).
const UnknownDomain = "_unknown"

// otherLabel is the rule label of the pairs past MaxSeries (and the domain
// label of the unmatched decisions of domains past it).
const otherLabel = "_other"

// label returns the label for (domain, rule) from the first-come budget:
// rule, or "_other" past MaxSeries.
func (m *Metrics) label(domain, rule string) string {
	k := [2]string{domain, rule}
	m.mu.RLock()
	ok := m.series[k]
	n := len(m.series)
	m.mu.RUnlock()
	if ok {
		return rule
	}
	if n >= MaxSeries {
		return otherLabel
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.series) >= MaxSeries && !m.series[k] {
		return otherLabel
	}
	m.series[k] = true
	return rule
}

// Decided records a decided request's descriptor outcomes. A descriptor
// with a store limit of a response the failure policy answered
// (StoreFallback) is fallback_ok or fallback_refused, by its code, and
// counts no shadow or near-limit decision: the policy's answer says
// nothing of the limit. Otherwise a descriptor
// is over_limit when an enforced limit refused it, else shadow_over_limit
// when its rule is in shadow mode and a shadow limit of it (its rule's or,
// in a hierarchy, one above) refused. shadow_decisions_total counts, once
// per rule and descriptor, each rule whose shadow limit refused a
// descriptor that passed (see countShadow); a descriptor an enforced limit
// refused counts no shadow refusal: its shadow limits were only looked at,
// and enforcing them would have blocked nothing more.
// priority_unknown_total counts, once per request, a response whose
// request named a priority class its domain does not declare
// (policy.Response.PriorityUnknown).
func (m *Metrics) Decided(domain string, resp *policy.Response) {
	if resp.PriorityUnknown {
		m.priorityUnknownCounter(domain).Inc()
	}
	for i := range resp.Statuses {
		s := &resp.Statuses[i]
		if !s.Matched {
			m.noRuleCounter(domain).Inc()
			continue
		}
		rs := m.ruleSeries(domain, s.Rule)
		outcome := outOK
		switch {
		case s.Unlimited:
			outcome = outUnlimited
		case resp.StoreFallback && s.RuleLimit != nil:
			// A requests_per_unit: 0 rule (no RuleLimit) refuses without
			// the store, policy or not.
			outcome = outFallbackOK
			if s.Code == policy.CodeOverLimit {
				outcome = outFallbackRefused
			}
			m.counter(rs, outcome, m.decisions, domain).Inc()
			continue
		case s.Code == policy.CodeOverLimit:
			outcome = outOverLimit
		default:
			if m.countShadow(domain, s, rs) && s.Shadow {
				outcome = outShadow
			}
		}
		m.counter(rs, outcome, m.decisions, domain).Inc()
		if outcome == outOK && s.Decision.Limit > 0 &&
			float64(s.Decision.Remaining) < (1-NearLimitRatio)*float64(s.Decision.Limit) {
			m.counter(rs, cNearLimit, m.nearLimit, domain).Inc()
		}
	}
}

// countShadow adds one to shadow_decisions_total for each rule with a
// shadow limit in s that refused, and reports whether there was one. Each
// limit counts for the rule it belongs to (policy.LimitStatus.Rule): a
// rule's ceil, priority pools and the lend pool it borrowed from count for
// it, not under names of their own, and a rule counts once per descriptor
// however many of its limits refused. rs is s's own rule's series. A
// status without Limits is its rule's one limit.
func (m *Metrics) countShadow(domain string, s *policy.Status, rs *ruleSeries) bool {
	if len(s.Limits) == 0 {
		if !s.Shadow || s.Decision.Allowed {
			return false
		}
		m.counter(rs, cShadow, m.shadow, domain).Inc()
		return true
	}
	refused := false
	for j := range s.Limits {
		ls := &s.Limits[j]
		if !ls.Shadow || ls.Decision.Allowed {
			continue
		}
		refused = true
		owner := ruleOf(ls)
		counted := false
		for k := range j {
			if l := &s.Limits[k]; l.Shadow && !l.Decision.Allowed && ruleOf(l) == owner {
				counted = true
				break
			}
		}
		if counted {
			continue
		}
		series := rs
		if owner != s.Rule {
			series = m.ruleSeries(domain, owner)
		}
		m.counter(series, cShadow, m.shadow, domain).Inc()
	}
	return refused
}

// ruleOf is the rule ls belongs to: its Rule, or its Name in a status
// built without one.
func ruleOf(ls *policy.LimitStatus) string {
	if ls.Rule != "" {
		return ls.Rule
	}
	return ls.Name
}

// Indexes of ruleSeries.c: decisions_total by outcome, then
// shadow_decisions_total and near_limit_total.
const (
	outOK = iota
	outOverLimit
	outShadow
	outUnlimited
	outFallbackOK
	outFallbackRefused
	cShadow
	cNearLimit
	nRuleCounters
)

// outcomeNames are decisions_total's outcome labels by index.
var outcomeNames = [...]string{outOK: OutcomeOK, outOverLimit: OutcomeOverLimit, outShadow: OutcomeShadow, outUnlimited: OutcomeUnlimited,
	outFallbackOK: OutcomeFallbackOK, outFallbackRefused: OutcomeFallbackRefused}

// ruleSeries is a (domain, rule) pair's label and its counters, each
// resolved on first use (a series appears once it has counted something).
type ruleSeries struct {
	label string // the rule, RequestLimitLabel, or "_other" past MaxSeries
	// shared marks a domain's RequestLimitLabel or "_other" series, which
	// go with their domain; the others go with their rule.
	shared bool
	c      [nRuleCounters]atomic.Pointer[prometheus.Counter]
}

// ruleSeries returns the series of (domain, rule). A rule of the
// configuration in force is cached under its name. Once the configuration
// is known, any other name is a request's (its per-descriptor limit's
// path with values) and shares its domain's RequestLimitLabel series;
// before, the pairs within MaxSeries are cached by name and a pair past it
// shares its domain's "_other" series. Names shared under one label are not
// kept: rules named after request values would grow the cache without end.
// A configured rule's first decision, and each on a request's limit, cost
// one more map lookup, without allocating.
func (m *Metrics) ruleSeries(domain, rule string) *ruleSeries {
	k := [2]string{domain, rule}
	if rs, ok := m.rules.Load(k); ok {
		return rs.(*ruleSeries)
	}
	label := rule
	if names := m.ruleNames(); names != nil {
		if _, ok := names.set[k]; !ok {
			return sharedSeries(&m.requested, domain, RequestLimitLabel)
		}
	} else if label = m.label(domain, rule); label == otherLabel {
		// The label set is full for good (series are never forgotten).
		return sharedSeries(&m.others, domain, otherLabel)
	}
	rs, _ := m.rules.LoadOrStore(k, &ruleSeries{label: label})
	return rs.(*ruleSeries)
}

// sharedSeries returns domain's series in byDomain, labelled label, making
// it on first use (loaded first: a decision that finds it allocates
// nothing).
func sharedSeries(byDomain *sync.Map, domain, label string) *ruleSeries {
	if rs, ok := byDomain.Load(domain); ok {
		return rs.(*ruleSeries)
	}
	rs, _ := byDomain.LoadOrStore(domain, &ruleSeries{label: label, shared: true})
	return rs.(*ruleSeries)
}

// ruleNames is the set of (domain, rule name) pairs of a Config, with its
// domains and the pairs of its adaptive rules.
type ruleNames struct {
	cfg      *policy.Config
	set      map[[2]string]struct{}
	domains  map[string]struct{}
	adaptive map[[2]string]struct{}
}

// ruleNames returns the rule names of the configuration in force, nil
// when the configuration is not known (no SetConfigSource). They are made
// again when the source returns another Config than last time, once per
// reload, and the series of what that Config no longer has are deleted
// then (prune).
func (m *Metrics) ruleNames() *ruleNames {
	src := m.config.Load()
	if src == nil {
		return nil
	}
	cfg := (*src)()
	if names := m.names.Load(); names != nil && names.cfg == cfg {
		return names
	}
	m.namesMu.Lock()
	defer m.namesMu.Unlock()
	// Read again under the lock: a configuration read before it may have
	// been replaced meanwhile, and pruning against it after its successor
	// was pruned against would delete the series of rules the successor
	// brought back (a counter reset for them).
	cfg = (*src)()
	if names := m.names.Load(); names != nil && names.cfg == cfg {
		return names
	}
	names := &ruleNames{cfg: cfg, set: map[[2]string]struct{}{}, domains: map[string]struct{}{}, adaptive: map[[2]string]struct{}{}}
	if cfg != nil {
		for _, r := range cfg.Rules() {
			k := [2]string{r.Domain, r.Name}
			names.set[k] = struct{}{}
			if r.Adaptive != nil {
				names.adaptive[k] = struct{}{}
			}
		}
		for _, d := range cfg.Domains() {
			names.domains[d.Name] = struct{}{}
		}
		m.prune(names)
		m.zeroRuleSeries(cfg)
	}
	m.names.Store(names)
	return names
}

// zeroRuleSeries makes the per-rule counters of cfg's rules that can count
// at 0, before their first event, so that increase() and rate() see it:
// near_limit_total of every rule with a limit (neither unlimited nor
// requests_per_unit: 0) and shadow_decisions_total of every shadow rule;
// and priority_unknown_total of every domain that declares priority
// classes. decisions_total's series appear with their first decision.
// Bounded by the configuration; a reload that removes a rule or a domain
// deletes them (prune).
func (m *Metrics) zeroRuleSeries(cfg *policy.Config) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, d := range cfg.Domains() {
		if len(d.Priorities) > 0 {
			m.prioUnknown.WithLabelValues(d.Name)
		}
	}
	for _, r := range cfg.Rules() {
		if r.Unlimited || r.Deny {
			continue
		}
		m.nearLimit.WithLabelValues(r.Domain, r.Name)
		if r.Shadow {
			m.shadow.WithLabelValues(r.Domain, r.Name)
		}
	}
}

// prune deletes the series of what next, the configuration now in force,
// no longer has but the one pruned against before had: every series of a
// removed domain (its rules', its RequestLimitLabel and "_other" ones, its
// no_rule decisions), those of each removed rule, and the
// adaptive_rate_factor of a rule that lost its adaptive block. The series
// of the rules still configured are left alone, so their counters never go
// back. A rule or domain a later reload brings back starts again from 0.
// The first configuration known prunes nothing: no reload removed anything
// yet.
func (m *Metrics) prune(next *ruleNames) {
	m.mu.Lock()
	defer m.mu.Unlock()
	prev := m.live
	m.live = next
	for d := range m.goneDomains {
		if _, ok := next.domains[d]; ok {
			delete(m.goneDomains, d)
		}
	}
	if prev == nil {
		return
	}
	for d := range prev.domains {
		if _, ok := next.domains[d]; ok || d == UnknownDomain || d == otherLabel {
			continue
		}
		m.goneDomains[d] = true
		m.requested.Delete(d)
		m.others.Delete(d)
		m.noRule.Delete(d)
		m.prioUnknownC.Delete(d)
		m.deleteSeries(prometheus.Labels{"domain": d})
		m.prioUnknown.DeleteLabelValues(d)
		for k := range m.series {
			if k[0] == d {
				delete(m.series, k)
			}
		}
	}
	// The rules prev had, whose series zeroRuleSeries made before any
	// decision cached them in m.rules.
	for p := range prev.set {
		if _, ok := next.set[p]; !ok {
			m.rules.Delete(p)
			m.deleteSeries(prometheus.Labels{"domain": p[0], "rule": p[1]})
			delete(m.series, p)
		}
	}
	m.rules.Range(func(k, _ any) bool {
		p := k.([2]string)
		if _, ok := next.set[p]; ok {
			return true
		}
		m.rules.Delete(k)
		m.deleteSeries(prometheus.Labels{"domain": p[0], "rule": p[1]})
		delete(m.series, p)
		return true
	})
	for p := range m.factors {
		if _, ok := next.adaptive[p]; !ok {
			m.factor.DeleteLabelValues(p[0], p[1])
			delete(m.factors, p)
		}
	}
}

// deleteSeries deletes the series matching labels from every vector
// labelled by domain and rule. m.mu is held.
func (m *Metrics) deleteSeries(labels prometheus.Labels) {
	m.decisions.DeletePartialMatch(labels)
	m.shadow.DeletePartialMatch(labels)
	m.nearLimit.DeletePartialMatch(labels)
	m.factor.DeletePartialMatch(labels)
}

// removedLocked reports whether the series rs of domain belongs to what
// the last prune removed: making it would bring back a deleted series.
// m.mu is held (read).
func (m *Metrics) removedLocked(domain string, rs *ruleSeries) bool {
	if m.goneDomains[domain] {
		return true
	}
	if rs == nil || rs.shared || m.live == nil {
		return false
	}
	_, ok := m.live.set[[2]string{domain, rs.label}]
	return !ok
}

// discard counts what a decision that raced a reload recorded for a rule
// the reload removed. It is registered nowhere.
var discard = prometheus.NewCounter(prometheus.CounterOpts{Name: "discarded"})

// SetConfigSource sets the function that returns the configuration in
// force (e.g. Engine.Config; server.New sets it). From then on, the
// rule names of the configuration it returns — at each reload, the new
// one's — are always labelled, and any other rule name, which can only
// come from a request, counts under RequestLimitLabel. Before it is set,
// rule names are labelled first come up to MaxSeries. The function is
// called when a decision names a rule not yet labelled; it must be cheap
// and safe for concurrent use.
func (m *Metrics) SetConfigSource(cfg func() *policy.Config) {
	m.config.Store(&cfg)
}

// counter returns rs's counter i, from vec, resolving it on first use. Two
// goroutines may both resolve it: WithLabelValues returns the same child.
// A series a reload has removed since rs was looked up is not made again
// (the count is dropped).
func (m *Metrics) counter(rs *ruleSeries, i int, vec *prometheus.CounterVec, domain string) prometheus.Counter {
	if c := rs.c[i].Load(); c != nil {
		return *c
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.removedLocked(domain, rs) {
		return discard
	}
	var c prometheus.Counter
	if i < len(outcomeNames) {
		c = vec.WithLabelValues(domain, rs.label, outcomeNames[i])
	} else {
		c = vec.WithLabelValues(domain, rs.label)
	}
	rs.c[i].Store(&c)
	return c
}

// noRuleCounter returns decisions_total{outcome="no_rule"} of domain. A
// request may name any domain, and one no rule knows decides nothing but
// this: past MaxSeries pairs, new domains count under domain "_other" and
// are not kept.
func (m *Metrics) noRuleCounter(domain string) prometheus.Counter {
	return m.domainCounter(&m.noRule, domain, false, func(d string) prometheus.Counter {
		return m.decisions.WithLabelValues(d, "", OutcomeNoRule)
	})
}

// priorityUnknownCounter returns priority_unknown_total of domain. Only a
// domain that declares priority classes has such requests: a domain of the
// configuration in force is labelled as itself; any other (a Metrics that
// does not know the configuration) takes a pair of the first-come budget
// (noRuleCounter's), and past MaxSeries counts under domain "_other" and
// is not kept.
func (m *Metrics) priorityUnknownCounter(domain string) prometheus.Counter {
	return m.domainCounter(&m.prioUnknownC, domain, true, func(d string) prometheus.Counter {
		return m.prioUnknown.WithLabelValues(d)
	})
}

// domainCounter returns the counter of domain cached in cache, made by
// mk. A domain takes a pair (domain, "") of the first-come MaxSeries
// budget (label), unless configuredAsItself is set and the configuration
// in force has the domain; past the budget it counts under domain "_other"
// and is not kept. A domain the last reload removed counts into discard,
// so that its pruned series is not made again.
func (m *Metrics) domainCounter(cache *sync.Map, domain string, configuredAsItself bool, mk func(domain string) prometheus.Counter) prometheus.Counter {
	if c, ok := cache.Load(domain); ok {
		return c.(prometheus.Counter)
	}
	configured := false
	if configuredAsItself {
		if names := m.ruleNames(); names != nil {
			_, configured = names.domains[domain]
		}
	}
	if !configured && m.label(domain, "") == otherLabel {
		domain = otherLabel
		if c, ok := cache.Load(domain); ok {
			return c.(prometheus.Counter)
		}
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.removedLocked(domain, nil) {
		return discard
	}
	c := mk(domain)
	cache.Store(domain, c)
	return c
}

// Request records one request on a transport ("grpc", "json", "v1",
// "v1-peek", "v1-release", "v1-renew") with its overall code: "OK",
// "OVER_LIMIT" (/v1: "batch" for a batch), "invalid" for a request the
// client got wrong (a 4xx, gRPC's INVALID_ARGUMENT), "error" for one the
// server failed (a 5xx, gRPC's UNAVAILABLE and the like).
func (m *Metrics) Request(transport, code string, d time.Duration) {
	k := [2]string{transport, code}
	c, ok := m.reqs.Load(k)
	if !ok {
		c = m.requests.WithLabelValues(transport, code)
		m.reqs.Store(k, c)
	}
	c.(prometheus.Counter).Inc()
	o, ok := m.reqLat.Load(transport)
	if !ok {
		o = m.reqLatency.WithLabelValues(transport)
		m.reqLat.Store(transport, o)
	}
	o.(prometheus.Observer).Observe(d.Seconds())
}

// StoreCall records a store call's latency and error.
func (m *Metrics) StoreCall(op string, d time.Duration, err error) {
	o, ok := m.storeLatOp.Load(op)
	if !ok {
		o = m.storeLat.WithLabelValues(op)
		m.storeLatOp.Store(op, o)
	}
	o.(prometheus.Observer).Observe(d.Seconds())
	if err != nil {
		m.storeErrs.WithLabelValues(op).Inc()
	}
}

// StoreHooks returns the resilient.Hooks that feed these metrics.
func (m *Metrics) StoreHooks() resilient.Hooks {
	return resilient.Hooks{
		Call:           m.StoreCall,
		State:          func(_, to resilient.BreakerState) { m.circuit.Set(float64(to)) },
		PartitionState: func(c resilient.PartitionChange) { m.openParts.Set(float64(c.Open)) },
		Fallback:       func(op string, p resilient.Policy, _ error) { m.fallbacks.WithLabelValues(op, p.String()).Inc() },
		CacheHit:       m.cacheHits.Inc,
	}
}

// StoreOps are the operations store/resilient reports to its hooks, the op
// label of store_errors_total, store_duration_seconds and (take and peek)
// store_fallbacks_total.
var StoreOps = []string{"take", "peek", "refund", "release", "renew", "reset", "inspect", "ping"}

// StoreSeries makes store_errors_total of every operation (StoreOps) and
// store_fallbacks_total of take and peek under policy p at 0, so that an
// alert on increase() or rate() sees the first outage's errors and
// fallbacks: a series made by its first event has no earlier sample to
// increase from. Call it for a store wrapped by store/resilient with
// StoreHooks and policy p (floodgate serve does for a remote store).
func (m *Metrics) StoreSeries(p resilient.Policy) {
	for _, op := range StoreOps {
		m.storeErrs.WithLabelValues(op)
	}
	for _, op := range []string{"take", "peek"} {
		m.fallbacks.WithLabelValues(op, p.String())
	}
}

// upstreamReasons are gateway_upstream_errors_total's reasons, those of
// package gateway (ReasonConnect, ...).
var upstreamReasons = []string{"connect", "timeout", "reset", "other"}

// GatewayUpstreamErrors returns the function that gateway.WithUpstreamErrors
// takes: it counts each upstream failure in
// floodgate_gateway_upstream_errors_total by reason, a reason outside the
// fixed set as "other". The call creates every reason's series at 0 (an
// alert on increase(…) sees the first failure), so a server without a
// gateway does not have them.
func (m *Metrics) GatewayUpstreamErrors() func(reason string) {
	byReason := make(map[string]prometheus.Counter, len(upstreamReasons))
	for _, r := range upstreamReasons {
		byReason[r] = m.upstreamErrs.WithLabelValues(r)
	}
	other := byReason["other"]
	return func(reason string) {
		if c, ok := byReason[reason]; ok {
			c.Inc()
			return
		}
		other.Inc()
	}
}

// gatewayOwnCodes are the statuses the gateway answers itself whose
// series GatewayResponses creates at 0: refused (429, 503 for a store
// failure or a shaper's late turn), bad (400, 408, 413) and upstream
// failures (502, 504).
var gatewayOwnCodes = []int{400, 408, 413, 429, 502, 503, 504}

// GatewayResponses returns the function that gateway.WithResponses takes:
// it counts each response in floodgate_gateway_responses_total by status
// code and by "upstream" or "floodgate". The call creates the series of the
// statuses the gateway answers itself at 0 (an alert on increase(…) sees
// the first), so a server without a gateway does not have them. The
// counters are cached per status: no allocation per response.
func (m *Metrics) GatewayResponses() func(route string, status int, upstream bool) {
	var cache [2][600]atomic.Pointer[prometheus.Counter]
	counter := func(status int, upstream bool) prometheus.Counter {
		by := 0
		if upstream {
			by = 1
		}
		if status < 100 || status > 599 {
			status = 0 // not a status net/http sends; counted as "other"
		}
		if c := cache[by][status].Load(); c != nil {
			return *c
		}
		code := "other"
		if status != 0 {
			code = strconv.Itoa(status)
		}
		c := m.gwResponses.WithLabelValues(code, [2]string{"floodgate", "upstream"}[by])
		cache[by][status].Store(&c)
		return c
	}
	for _, code := range gatewayOwnCodes {
		counter(code, false)
	}
	return func(_ string, status int, upstream bool) { counter(status, upstream).Inc() }
}

// config_reloads_total's results.
const (
	reloadSuccess = "success"
	reloadFailure = "failure"
)

// ConfigReloaded records a reload attempt: config_reloads_total by result,
// config_last_reload_successful 1 or 0, config_last_reload_timestamp_seconds,
// and on success config_last_reload_success_timestamp_seconds.
//
// A successful reload also deletes the series of the rules and domains
// it removed (when the configuration is known: SetConfigSource).
func (m *Metrics) ConfigReloaded(ok bool) {
	m.ruleNames()
	m.reloadTime.SetToCurrentTime()
	if ok {
		m.reloads.WithLabelValues(reloadSuccess).Inc()
		m.reloadOK.Set(1)
		m.lastReload.SetToCurrentTime()
		return
	}
	m.reloads.WithLabelValues(reloadFailure).Inc()
	m.reloadOK.Set(0)
}

// ConfigLoaded records the initial load (no reload counted): it sets
// both timestamps, and config_last_reload_successful to 1.
func (m *Metrics) ConfigLoaded() {
	m.reloadOK.Set(1)
	m.reloadTime.SetToCurrentTime()
	m.lastReload.SetToCurrentTime()
}

// RateFactor records an adaptive rule's factor, under the rule label its
// decisions have. Once the configuration is known, a factor for a rule
// that is not adaptive in it (a step that raced the reload removing its
// block) is not recorded: the reload deleted its series.
func (m *Metrics) RateFactor(domain, rule string, factor float64) {
	names := m.ruleNames()
	k := [2]string{domain, m.ruleSeries(domain, rule).label}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.live != nil && names != nil {
		if _, ok := m.live.adaptive[k]; !ok {
			return
		}
	}
	m.factors[k] = true
	m.factor.WithLabelValues(k[0], k[1]).Set(factor)
}

// SetBuildInfo makes build_info{version, goversion} 1, with version as
// the binary reports it (floodgate version's first line, without
// "floodgate ") and goversion runtime.Version(), for a query to join
// other series to the version running (… * on(instance) group_left(version)
// floodgate_build_info). A second call replaces the first's series. Before
// any call build_info has no series (server.New calls it).
func (m *Metrics) SetBuildInfo(version string) {
	m.buildInfo.Reset()
	m.buildInfo.WithLabelValues(version, runtime.Version()).Set(1)
}

// SetQueueDepth sets the function queue_depth reads (e.g. Engine.Waiting).
func (m *Metrics) SetQueueDepth(f func() int) {
	m.queueMu.Lock()
	m.queueDepth = f
	m.queueMu.Unlock()
}

// QueueDepth returns the current queue depth.
func (m *Metrics) QueueDepth() int {
	m.queueMu.Lock()
	f := m.queueDepth
	m.queueMu.Unlock()
	if f == nil {
		return 0
	}
	return f()
}

// Summary is what the dashboard polls: cumulative counters (the page
// computes rates between two polls) and current gauges.
type Summary struct {
	// Time is when the summary was taken (Unix ms).
	Time int64 `json:"time_ms"`
	// Decisions counts descriptor decisions by outcome.
	Decisions map[string]float64 `json:"decisions"`
	// Rules counts decisions by "domain/rule" and outcome.
	Rules []RuleCount `json:"rules"`
	// Requests counts requests by transport.
	Requests map[string]float64 `json:"requests"`
	// StoreCalls and StoreErrors count store calls; StoreP50 and StoreP99
	// are latency quantiles (ms) estimated from the histogram since start.
	StoreCalls  float64 `json:"store_calls"`
	StoreErrors float64 `json:"store_errors"`
	StoreP50    float64 `json:"store_p50_ms"`
	StoreP99    float64 `json:"store_p99_ms"`
	Fallbacks   float64 `json:"fallbacks"`
	CacheHits   float64 `json:"over_limit_cache_hits"`
	Circuit     string  `json:"circuit"`
	// OpenPartitions is how many breakers are open or half-open, with a
	// breaker per partition (a Cluster's slot ranges, memcached servers).
	OpenPartitions int                `json:"circuit_open_partitions"`
	QueueDepth     int                `json:"queue_depth"`
	Reloads        map[string]float64 `json:"config_reloads"`
}

// RuleCount is one rule's decisions by outcome.
type RuleCount struct {
	Domain   string             `json:"domain"`
	Rule     string             `json:"rule"`
	Outcomes map[string]float64 `json:"outcomes"`
}

// Summary gathers the metrics into a Summary.
func (m *Metrics) Summary() Summary {
	m.ruleNames()
	s := Summary{Time: time.Now().UnixMilli(), Decisions: map[string]float64{}, Requests: map[string]float64{},
		Reloads: map[string]float64{}, Circuit: "closed", QueueDepth: m.QueueDepth()}
	families, _ := m.reg.Gather()
	rules := map[[2]string]*RuleCount{}
	var storeBuckets []*dto.Bucket
	var storeCount uint64
	for _, f := range families {
		for _, mt := range f.GetMetric() {
			lv := labels(mt)
			switch f.GetName() {
			case "floodgate_decisions_total":
				v := mt.GetCounter().GetValue()
				s.Decisions[lv["outcome"]] += v
				if lv["rule"] == "" {
					continue
				}
				k := [2]string{lv["domain"], lv["rule"]}
				rc := rules[k]
				if rc == nil {
					rc = &RuleCount{Domain: k[0], Rule: k[1], Outcomes: map[string]float64{}}
					rules[k] = rc
				}
				rc.Outcomes[lv["outcome"]] += v
			case "floodgate_requests_total":
				s.Requests[lv["transport"]] += mt.GetCounter().GetValue()
			case "floodgate_store_errors_total":
				s.StoreErrors += mt.GetCounter().GetValue()
			case "floodgate_store_fallbacks_total":
				s.Fallbacks += mt.GetCounter().GetValue()
			case "floodgate_over_limit_cache_hits_total":
				s.CacheHits = mt.GetCounter().GetValue()
			case "floodgate_circuit_state":
				s.Circuit = resilient.BreakerState(mt.GetGauge().GetValue()).String()
			case "floodgate_circuit_open_partitions":
				s.OpenPartitions = int(mt.GetGauge().GetValue())
			case "floodgate_config_reloads_total":
				s.Reloads[lv["result"]] = mt.GetCounter().GetValue()
			case "floodgate_store_duration_seconds":
				h := mt.GetHistogram()
				s.StoreCalls += float64(h.GetSampleCount())
				if lv["op"] == "take" || storeBuckets == nil {
					storeBuckets, storeCount = h.GetBucket(), h.GetSampleCount()
				}
			}
		}
	}
	s.StoreP50 = quantile(storeBuckets, storeCount, 0.5) * 1e3
	s.StoreP99 = quantile(storeBuckets, storeCount, 0.99) * 1e3
	for _, rc := range rules {
		s.Rules = append(s.Rules, *rc)
	}
	sort.Slice(s.Rules, func(i, j int) bool {
		if s.Rules[i].Domain != s.Rules[j].Domain {
			return s.Rules[i].Domain < s.Rules[j].Domain
		}
		return s.Rules[i].Rule < s.Rules[j].Rule
	})
	return s
}

func labels(m *dto.Metric) map[string]string {
	out := make(map[string]string, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// quantile estimates the q-quantile (seconds) of cumulative buckets by
// linear interpolation inside the bucket that holds it.
func quantile(bs []*dto.Bucket, n uint64, q float64) float64 {
	if n == 0 || len(bs) == 0 {
		return 0
	}
	rank := q * float64(n)
	prevUpper, prevCount := 0.0, 0.0
	for _, b := range bs {
		c := float64(b.GetCumulativeCount())
		if c >= rank {
			if c == prevCount {
				return b.GetUpperBound()
			}
			return prevUpper + (b.GetUpperBound()-prevUpper)*(rank-prevCount)/(c-prevCount)
		}
		prevUpper, prevCount = b.GetUpperBound(), c
	}
	return prevUpper
}
