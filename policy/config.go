package policy

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate/adaptive"
	"github.com/floodgate/floodgate/algo"
)

// Strategies on excess, the values of a rule's strategy field and of
// Response.Strategy.
const (
	// StrategyReject refuses the request at once (HTTP 429, gRPC
	// OVER_LIMIT). It is the default.
	StrategyReject = "reject"
	// StrategyWait lets the request wait, up to the rule's max_wait, for
	// capacity to come back (see Engine.DecideWait).
	StrategyWait = "wait"
	// StrategyDegrade asks the caller to run the fallback the rule names
	// instead of the request.
	StrategyDegrade = "degrade"
	// StrategyShadow decides and reports but never refuses: the same as
	// shadow_mode: true.
	StrategyShadow = "shadow"
)

// Pos is where something was written: a file and a 1-based line.
type Pos struct {
	File string
	Line int
}

// String returns "file:line".
func (p Pos) String() string { return p.File + ":" + strconv.Itoa(p.Line) }

// Config is a loaded and validated configuration: a set of domains, each a
// tree of descriptors with their rules. It is immutable once loaded and safe
// for concurrent use; an Engine decides with it.
type Config struct {
	domains  map[string]*Domain
	names    []string // sorted
	rules    []*Rule  // every rule of every domain, numbered by Rule.index
	warnings Problems
	noFiles  bool // loaded from a directory holding no configuration file
}

// Warnings returns what loaded but may not mean what its author meant,
// sorted by file and line: fields envoyproxy/ratelimit ignores where they
// are written (ignored here too), fields set twice (the last one wins),
// several YAML documents in one file, a directory without configuration
// files, a wait or degrade strategy on a rule its descriptor shadows, a
// ceil its parent caps, a wait rule's max_wait shorter than a fixed window
// or than a bucket's refill of one unit. `floodgate validate` prints them
// as "file:line: warning: message"; the Config is valid all the same.
func (c *Config) Warnings() Problems { return slices.Clone(c.warnings) }

// Domains returns the domains sorted by name.
func (c *Config) Domains() []*Domain {
	out := make([]*Domain, 0, len(c.names))
	for _, n := range c.names {
		out = append(out, c.domains[n])
	}
	return out
}

// Domain returns the named domain, or nil.
func (c *Config) Domain(name string) *Domain {
	if c == nil {
		return nil
	}
	return c.domains[name]
}

// Rules returns every rule of every domain, domains sorted by name and
// rules in file order.
func (c *Config) Rules() []*Rule { return slices.Clone(c.rules) }

// Domain is one domain's rules: Envoy's rate limit domain, a namespace that
// requests name in Request.Domain.
type Domain struct {
	// Name is the domain, unique in a Config.
	Name string
	// Pos is where the domain was declared.
	Pos Pos
	// Hierarchy is the domain's default for descriptors that do not set
	// hierarchy themselves.
	Hierarchy bool
	// HashTag (hash_tag: true) makes the first entry of every key's
	// descriptor path its Redis Cluster hash tag ("fg:d|{tenant=acme}|user=bob#…"):
	// every limit under one first-level value lives in one slot, so a
	// hierarchy below it is decided by one atomic script instead of a
	// reservation per slot. Limits with no entry (the domain's rate_limit)
	// hash on their own. Other stores ignore it.
	HashTag bool
	// Root is the domain-wide limit at the top of every hierarchy (the
	// domain-level rate_limit), or nil.
	Root *Rule
	// Priorities are the priority classes, highest first; empty when the
	// domain declares none.
	Priorities []string
	// DefaultPriority is the class of requests that name none.
	DefaultPriority string
	// Descriptors are the top-level descriptors in file order.
	Descriptors []*Node
	// Sections are the compiled domain-level sections other packages
	// registered (RegisterSection), by field name; e.g.
	// Sections["dimensions"] as package dimension compiles it.
	Sections map[string]any

	rules []*Rule // in file order; Root first when set
	top   level
}

// Rules returns the domain's rules in file order (Root first when set).
func (d *Domain) Rules() []*Rule { return slices.Clone(d.rules) }

// priorityRank returns the class's position (0 = highest) or -1. A name
// is matched ignoring case and the spaces around it (the loader refuses
// classes that differ only so); the exact name is tried first, so a
// request naming a class as declared costs no more.
func (d *Domain) priorityRank(class string) int {
	if i := slices.Index(d.Priorities, class); i >= 0 {
		return i
	}
	class = strings.TrimSpace(class)
	for i, c := range d.Priorities {
		if strings.EqualFold(c, class) {
			return i
		}
	}
	return -1
}

// Node is one descriptor of the configuration tree: a key, an optional value
// (exact, or a wildcard pattern when it contains '*') and optionally a rule.
type Node struct {
	// Key is the descriptor entry's key. Never empty.
	Key string
	// Value is the entry's value: "" matches any value; a value containing
	// '*' is a pattern in which each '*' matches any run of characters,
	// none included ("prefix*", "/api/*/v1", "a*b*c"); anything else
	// matches exactly itself (see MatchValue).
	Value string
	// Pos is where the descriptor was declared.
	Pos Pos
	// Rule is the descriptor's rate_limit, or nil for a descriptor that
	// only groups nested ones (or allows everything when it has none).
	Rule *Rule
	// ShadowMode, QuotaMode, DetailedMetric and ShareThreshold are the
	// descriptor's flags of the same names (envoyproxy/ratelimit's); a
	// QuotaMode descriptor's rule is a shadow rule.
	ShadowMode, QuotaMode, DetailedMetric, ShareThreshold bool
	// Hierarchy reports whether a rule matched at or below this descriptor
	// also takes from the rules above it.
	Hierarchy bool
	// Parent is the enclosing descriptor, nil at the top level.
	Parent *Node
	// Children are the nested descriptors in file order.
	Children []*Node

	pattern []string // a wildcard Value split at its '*'s; nil for other values
	depth   int      // 1 at the top level: the number of entries that reach it
	sub     level
	// valueToMetric is Envoy's value_to_metric: the metric key carries the
	// request's value for this entry.
	valueToMetric bool
}

// level indexes one list of sibling descriptors for matching: exact values
// first, then wildcard prefixes in file order, then value-less keys.
type level struct {
	exact map[entryKey]*Node
	wild  []*Node
	any   map[string]*Node
}

type entryKey struct{ key, value string }

func (lv *level) add(n *Node) {
	switch {
	case n.Value == "":
		if lv.any == nil {
			lv.any = map[string]*Node{}
		}
		lv.any[n.Key] = n
	default:
		if lv.exact == nil {
			lv.exact = map[entryKey]*Node{}
		}
		lv.exact[entryKey{n.Key, n.Value}] = n
		if n.pattern != nil {
			lv.wild = append(lv.wild, n)
		}
	}
}

// find returns the most specific sibling for the entry: an exact value, then
// the first wildcard pattern in file order that matches, then the value-less
// key.
func (lv *level) find(key, value string) *Node {
	if n := lv.exact[entryKey{key, value}]; n != nil {
		return n
	}
	for _, n := range lv.wild {
		if n.Key == key && n.MatchValue(value) {
			return n
		}
	}
	return lv.any[key]
}

// MatchValue reports whether a request entry's value matches the
// descriptor's Value: any value when Value is ""; for a wildcard pattern,
// a value made of its literal parts in order, each '*' standing for any run
// of characters, none included (envoyproxy/ratelimit's wildcards, a
// trailing '*' being a prefix match); otherwise the value itself.
func (n *Node) MatchValue(value string) bool {
	switch {
	case n.Value == "":
		return true
	case n.pattern == nil:
		return value == n.Value
	}
	return globMatch(n.pattern, value)
}

// globMatch reports whether value matches a pattern split at its '*'s
// (at least two parts): it starts with the first part, ends with the last,
// and holds the middle ones in order between them. Taking each middle part
// at its leftmost place leaves the most room for the rest, so one pass
// decides. No allocation.
func globMatch(parts []string, value string) bool {
	first, last := parts[0], parts[len(parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

func (lv *level) empty() bool {
	return len(lv.exact) == 0 && len(lv.any) == 0
}

// Rule is one rate_limit block, compiled. Its fields are read-only.
type Rule struct {
	// Domain is the owning domain's name.
	Domain string
	// Name is rate_limit.name, else Path (for the domain's Root: the
	// domain's name). It names the rule in responses, headers, metrics,
	// replaces and overrides.
	Name string
	// Path is Envoy's key for the rule: the keys and values that reach it,
	// "key_value.key2" ("" for the domain's Root).
	Path string
	// Pos is where the rate_limit block was written.
	Pos Pos
	// Node is the descriptor that holds the rule; nil for the Root.
	Node *Node
	// Unlimited rules admit everything without a store call.
	Unlimited bool
	// Deny rules (requests_per_unit: 0) refuse everything without a store
	// call, as Envoy's do.
	Deny bool
	// Shadow rules decide and report but never refuse.
	Shadow bool
	// Params are the algorithm's parameters as written (before overrides
	// and adaptive scaling); zero for Unlimited rules, and for Deny rules
	// only the window: Period (Unit × UnitMultiplier, or the period
	// written) or Calendar.
	Params algo.Params
	// Unit is the Envoy unit as written ("second" … "year"), "" when the
	// rule set a period instead.
	Unit string
	// UnitMultiplier is unit_multiplier as written (envoyproxy/ratelimit's):
	// the period is Unit × UnitMultiplier (Params.Period holds the product).
	// 1 when Unit is set without it, 0 when Unit is not set.
	UnitMultiplier int64
	// Replaces names the rules this one replaces when both match.
	Replaces []string
	// Strategy is what happens on excess: StrategyReject, StrategyWait,
	// StrategyDegrade or StrategyShadow.
	Strategy string
	// MaxWait bounds how long a request may wait: the wait strategy's
	// deadline, and the smooth algorithms' own max wait.
	MaxWait time.Duration
	// MaxWaiters bounds the wait strategy's queue (0: the queue's default).
	MaxWaiters int
	// QueueOrder is the wait queue's order: "priority" (default) or "fifo".
	QueueOrder string
	// Fallback names the fallback of the degrade strategy.
	Fallback string
	// Priority, when set, is the class of requests matching this rule that
	// name no class themselves.
	Priority string
	// Ceil, when > 0, lets the rule borrow from its parent: up to Ceil
	// requests per period while the parent has capacity to spare.
	Ceil int64
	// Lendable is the share of this rule's capacity its children may
	// borrow in total (0 < Lendable <= 1; 1 when not set).
	Lendable float64
	// Reserve maps a priority class to the share of this rule's capacity
	// that requests of that class (and lower ones) may not use, kept for the
	// classes above it; never the highest class (an error at load).
	Reserve map[string]float64
	// Hierarchical rules also take from every limited rule above them.
	Hierarchical bool
	// DetailedMetric and ShareThreshold copy the descriptor's flags.
	DetailedMetric, ShareThreshold bool
	// Adaptive, when set, lets a controller scale the rate from a load
	// signal (see package adaptive and Engine.Observe).
	Adaptive *adaptive.Config

	index  int         // position in Config.rules
	parent *Rule       // next limited rule up the hierarchy (or Root)
	limit  *algo.Limit // compiled Params; nil for Unlimited and Deny
	fp     string      // key fingerprint: algorithm and period
	broken bool        // had problems; never compiled
	named  bool        // Name came from rate_limit.name (only those can be replaced)
	// metricKey is Status.MetricKey when it takes no request value; ""
	// when detailed_metric or value_to_metric put values in it.
	metricKey string
}

// Limit returns the compiled limit as configured, or nil for unlimited and
// deny rules.
func (r *Rule) Limit() *algo.Limit { return r.limit }

// Parent returns the limited rule above this one in the hierarchy (an
// ancestor descriptor's rule or the domain's Root), or nil.
func (r *Rule) Parent() *Rule { return r.parent }

// unitPeriods are the Envoy units (and our additions) with fixed lengths;
// month and year are calendar periods.
var unitPeriods = map[string]time.Duration{
	"second": time.Second,
	"minute": time.Minute,
	"hour":   time.Hour,
	"day":    24 * time.Hour,
	"week":   7 * 24 * time.Hour,
}

// ParseUnit reads a rate limit unit as the configuration's `unit` does
// (any case): second, minute, hour, day and week are periods of fixed
// length; month and year are UTC calendar periods (for fixed windows). ok
// is false for any other name.
func ParseUnit(name string) (period time.Duration, cal algo.Calendar, ok bool) {
	u := strings.ToLower(name)
	if d, ok := unitPeriods[u]; ok {
		return d, algo.CalendarNone, true
	}
	switch u {
	case "month":
		return 0, algo.CalendarMonth, true
	case "year":
		return 0, algo.CalendarYear, true
	}
	return 0, algo.CalendarNone, false
}

// describe renders the limit for Dump, e.g. "fixed_window 5/day".
func (r *Rule) describe() string {
	per := r.Unit
	if r.UnitMultiplier > 1 {
		per = fmt.Sprintf("%d %ss", r.UnitMultiplier, r.Unit)
	}
	switch {
	case r.Unlimited:
		return "unlimited"
	case r.Deny && r.Unit == "":
		return "deny (requests_per_unit 0) per " + formatDuration(r.Params.Period)
	case r.Deny:
		return "deny (requests_per_unit 0) per " + per
	}
	p := r.limit.Params()
	var b strings.Builder
	fmt.Fprintf(&b, "%s %d/", p.Algorithm, p.Limit)
	switch {
	case p.Algorithm == algo.Concurrency && r.Unit == "" && p.Period == 0:
		b.WriteString("in-flight")
	case r.Unit != "":
		b.WriteString(per)
	default:
		b.WriteString(formatDuration(p.Period))
	}
	if c := r.limit.Capacity(); c != p.Limit {
		fmt.Fprintf(&b, " capacity=%d", c)
	}
	if p.InitialTokens != nil {
		fmt.Fprintf(&b, " initial_tokens=%d", *p.InitialTokens)
	}
	if p.Algorithm == algo.SlidingWindow {
		fmt.Fprintf(&b, " sub_windows=%d", p.SubWindows)
	}
	if p.Algorithm == algo.Shaper && p.Delay > 0 {
		fmt.Fprintf(&b, " delay=%d", p.Delay)
	}
	if p.Algorithm == algo.SmoothWarmup {
		fmt.Fprintf(&b, " warmup_period=%s cold_factor=%g", formatDuration(p.WarmupPeriod), p.ColdFactor)
	}
	if p.Algorithm == algo.SmoothBursty {
		fmt.Fprintf(&b, " max_burst_seconds=%g", p.MaxBurstSeconds)
	}
	if p.Retain > 0 {
		fmt.Fprintf(&b, " retain=%s", formatDuration(p.Retain))
	}
	if p.Algorithm == algo.Concurrency {
		fmt.Fprintf(&b, " lease_ttl=%s", formatDuration(r.limit.Window(0)))
	}
	return b.String()
}

// Dump renders the configuration as stable text, one line per descriptor,
// for golden tests and `floodgate validate -v`: domains sorted by name,
// descriptors in file order.
func (c *Config) Dump() string {
	var b strings.Builder
	for _, d := range c.Domains() {
		fmt.Fprintf(&b, "domain %s", d.Name)
		if d.Hierarchy {
			b.WriteString(" hierarchy")
		}
		if d.HashTag {
			b.WriteString(" hash_tag")
		}
		if len(d.Priorities) > 0 {
			fmt.Fprintf(&b, " priorities=%s default_priority=%s", strings.Join(d.Priorities, ","), d.DefaultPriority)
		}
		for _, name := range sortedKeys(d.Sections) {
			fmt.Fprintf(&b, " %s", name)
		}
		b.WriteByte('\n')
		if d.Root != nil {
			fmt.Fprintf(&b, "  (root) %s\n", d.Root.dumpRule())
		}
		for _, n := range d.Descriptors {
			n.dump(&b, 1)
		}
	}
	return b.String()
}

func (n *Node) dump(b *strings.Builder, depth int) {
	b.WriteString(strings.Repeat("  ", depth))
	b.WriteString(n.Key)
	if n.Value != "" {
		b.WriteString("=" + strconv.Quote(n.Value))
	}
	for _, f := range []struct {
		on   bool
		name string
	}{{n.ShadowMode, "shadow_mode"}, {n.QuotaMode, "quota_mode"}, {n.DetailedMetric, "detailed_metric"}, {n.ShareThreshold, "share_threshold"}} {
		if f.on {
			b.WriteString(" " + f.name)
		}
	}
	if n.Rule != nil {
		b.WriteString(" -> " + n.Rule.dumpRule())
	}
	b.WriteByte('\n')
	for _, c := range n.Children {
		c.dump(b, depth+1)
	}
}

func (r *Rule) dumpRule() string {
	var b strings.Builder
	fmt.Fprintf(&b, "[%s] %s", r.Name, r.describe())
	if r.Shadow {
		b.WriteString(" shadow")
	}
	if r.Hierarchical && r.parent != nil {
		fmt.Fprintf(&b, " parent=%s", r.parent.Name)
	}
	if r.Ceil > 0 {
		fmt.Fprintf(&b, " ceil=%d", r.Ceil)
	}
	if r.Lendable != 1 && r.Lendable != 0 {
		fmt.Fprintf(&b, " lendable=%g", r.Lendable)
	}
	if len(r.Reserve) > 0 {
		keys := make([]string, 0, len(r.Reserve))
		for k := range r.Reserve {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s:%g", k, r.Reserve[k])
		}
		fmt.Fprintf(&b, " reserve={%s}", strings.Join(parts, ","))
	}
	if r.Priority != "" {
		fmt.Fprintf(&b, " priority=%s", r.Priority)
	}
	if a := r.Adaptive; a != nil {
		fmt.Fprintf(&b, " adaptive={min:%g max:%g initial:%g latency_threshold:%s quantile:%g error_ratio:%g decrease:%g increase:%g interval:%s min_samples:%d}",
			a.Min, a.Max, a.Initial, formatDuration(a.LatencyThreshold), a.Quantile, a.ErrorRatio, a.Decrease, a.Increase, formatDuration(a.Interval), a.MinSamples)
	}
	if len(r.Replaces) > 0 {
		fmt.Fprintf(&b, " replaces=%s", strings.Join(r.Replaces, ","))
	}
	if r.Strategy != StrategyReject && r.Strategy != StrategyShadow {
		fmt.Fprintf(&b, " strategy=%s", r.Strategy)
		if r.Strategy == StrategyWait {
			fmt.Fprintf(&b, " max_wait=%s", formatDuration(r.MaxWait))
			if r.MaxWaiters > 0 {
				fmt.Fprintf(&b, " max_waiters=%d", r.MaxWaiters)
			}
			if r.QueueOrder != "" {
				fmt.Fprintf(&b, " queue_order=%s", r.QueueOrder)
			}
		}
		if r.Fallback != "" {
			fmt.Fprintf(&b, " fallback=%s", r.Fallback)
		}
	}
	fmt.Fprintf(&b, " @%d", r.Pos.Line)
	return b.String()
}

// formatDuration prints whole days as "36h"-style Go durations without the
// trailing zero units ("1m" rather than "1m0s").
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
