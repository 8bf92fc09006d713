package sim

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate/floodgate/algo"
)

// ErrScenario is wrapped by every error that reports a bad scenario, from
// YAML, from flags or from a replay file.
var ErrScenario = errors.New("bad scenario")

// Scenario is one simulation: the traffic, the limit every contender
// enforces, the contenders and the events that happen during the run. Build
// it in Go, with ParseScenario from YAML or with Main's flags; Validate (or
// Run, which calls it) fills in the defaults documented on each field.
// Where a field's 0 means its default, in Go that is what 0 does, while
// YAML (and a --contender) that writes the field as 0 is refused: leave it
// out for the default.
type Scenario struct {
	// Name labels the report. Default "sim".
	Name string `yaml:"name"`
	// Seed drives every random choice (Poisson gaps, Zipf keys, random load
	// balancing): the same seed gives byte-identical output.
	Seed uint64 `yaml:"seed"`
	// Duration is how much simulated time to run. Required for generated
	// traffic; default for a replay is up to its last request, rounded up
	// to a whole second. Replayed requests at or after a shorter Duration
	// are not offered (Result.ReplayPast counts them).
	Duration Duration `yaml:"duration,omitempty"`
	// Bin is the resolution of every time series in the report. Default 1s,
	// or Duration/3600 rounded up to a second for runs longer than an hour.
	// At most a million bins.
	Bin Duration `yaml:"bin,omitempty"`
	// Limit is the number of units each key may use in any span of Period:
	// the policy every contender is configured with and the perfect sliding
	// window it is judged against. Required, > 0.
	Limit int64 `yaml:"limit"`
	// Period is the window of Limit. Required.
	Period Duration `yaml:"period"`
	// Instances is the default number K of simulated instances behind the
	// load balancer for the distributed strategies. Default 4.
	Instances int `yaml:"instances,omitempty"`
	// FocusKey is the key (index) whose window count the window charts
	// follow. Default 0: the most frequent key of a Zipf mix.
	FocusKey int `yaml:"focus_key"`
	// Traffic is the request sources; their arrivals are merged in time
	// order. At least one.
	Traffic []Source `yaml:"traffic"`
	// Contenders are the limiters compared. Default: every algorithm and
	// every distributed strategy (see DefaultContenders).
	Contenders []Contender `yaml:"contenders"`
	// Events change the cluster during the run (scale-out, scale-in).
	Events []Event `yaml:"events"`

	// file names the scenario's origin in error messages.
	file string
	// flags is set when Main built the scenario from its flags: errors
	// then name the flags (--rate) rather than YAML paths (traffic[0]).
	flags bool
	// validated is set once Validate has run.
	validated bool
	// written maps each top-level field of the YAML to its line (see
	// Contender.written).
	written map[string]int
}

// zeroWritten is the error for a field written as 0 (in YAML) whose 0
// means "the default" when it is left out, as a flag's 0 is (Main): the
// default would silently replace the 0 asked for. hint says what leaving
// it out does. nil when written does not hold field or zero is false.
func (sc *Scenario) zeroWritten(written map[string]int, field string, zero bool, prefix, hint string) error {
	line, ok := written[field]
	if !ok || !zero {
		return nil
	}
	return sc.errorf(line, "%s%s: must be > 0, got 0; %s", prefix, field, hint)
}

// Source kinds.
const (
	SourceSteady  = "steady"  // one request every 1/Rate seconds
	SourcePoisson = "poisson" // Poisson arrivals at Rate
	SourceBursts  = "bursts"  // Rate during On, silence during Off, repeated
	SourceDiurnal = "diurnal" // rate swings between Rate and Peak over Cycle
	SourceRamp    = "ramp"    // rate moves linearly from Rate to Peak
	SourceFlash   = "flash"   // Rate, then a flash crowd rising to Peak at At
	SourceReplay  = "replay"  // requests read from File
)

var sourceKinds = []string{SourceSteady, SourcePoisson, SourceBursts, SourceDiurnal, SourceRamp, SourceFlash, SourceReplay}

// Source generates requests. Which fields apply depends on Kind; arrivals
// are Poisson except for steady (and bursts with Process "steady").
type Source struct {
	// Kind is one of steady, poisson, bursts, diurnal, ramp, flash, replay.
	Kind string `yaml:"kind"`
	// Rate is the request rate (per second; YAML also takes "100/m" or
	// "5/1m"): the constant rate, the rate during a burst, the low point of
	// diurnal and flash, the start of a ramp.
	Rate Rate `yaml:"rate,omitempty"`
	// Peak is the high point of diurnal and flash and the end rate of ramp.
	// Required (> 0) for those three: Rate defaults to 0 there, so a swing,
	// ramp or crowd from silence needs only Peak.
	Peak Rate `yaml:"peak,omitempty"`
	// From and To bound the source in simulated time (default the whole run).
	From Duration `yaml:"from,omitempty"`
	To   Duration `yaml:"to,omitempty"`
	// Keys is how many distinct keys (clients) the source spreads over.
	// Default 1.
	Keys int `yaml:"keys,omitempty"`
	// Zipf, when > 1, picks keys with a Zipf law of that exponent (key 0 most
	// often); 0 picks them uniformly.
	Zipf float64 `yaml:"zipf,omitempty"`
	// KeyOffset shifts this source's key indexes so that sources can use
	// disjoint or overlapping key sets. Default 0 (shared).
	KeyOffset int `yaml:"key_offset,omitempty"`
	// Cost is the units each request takes. Default 1.
	Cost int64 `yaml:"cost,omitempty"`
	// On and Off are the burst and pause lengths of bursts.
	On  Duration `yaml:"on,omitempty"`
	Off Duration `yaml:"off,omitempty"`
	// Process is "poisson" (default) or "steady" for bursts.
	Process string `yaml:"process,omitempty"`
	// Cycle is the period of diurnal. Default the source's span (the run's
	// duration, or To - From).
	Cycle Duration `yaml:"cycle,omitempty"`
	// At, Rise, Hold and Decay shape a flash crowd: at At the rate climbs
	// linearly to Peak over Rise, stays for Hold, then falls back towards
	// Rate with time constant Decay (default Rise). At must fall before
	// the source ends, and Rise, Hold and Decay must not all be 0 (a crowd
	// that lasts no time).
	At    Duration `yaml:"at,omitempty"`
	Rise  Duration `yaml:"rise,omitempty"`
	Hold  Duration `yaml:"hold,omitempty"`
	Decay Duration `yaml:"decay,omitempty"`
	// File is the replay log: one request per line, "time key [cost]",
	// where time is seconds since the start (decimal) or an RFC 3339
	// instant (taken relative to the first line); '#' starts a comment.
	// A relative path is taken from the current directory; the
	// scenario.yaml of a report holds the absolute path.
	File string `yaml:"file,omitempty"`

	line int
	// written maps each field of the YAML to its line (see
	// Contender.written).
	written map[string]int
}

// Strategies: how K instances share a limit.
const (
	StrategySingle  = "single"  // one limiter, no distribution
	StrategyCentral = "central" // every decision on a central store, one round trip
	StrategyLocal   = "local"   // each instance enforces Limit ÷ K on its own
	StrategySticky  = "sticky"  // keys stick to one instance that enforces Limit
	StrategyAsync   = "async"   // local decisions on counts shared with a lag
	StrategyLease   = "lease"   // instances lease slices of budget from a store
)

var strategies = []string{StrategySingle, StrategyCentral, StrategyLocal, StrategySticky, StrategyAsync, StrategyLease}

// Load balancer policies.
const (
	BalanceRoundRobin = "round_robin"
	BalanceRandom     = "random"
	BalanceWeighted   = "weighted"
	BalanceSticky     = "sticky"
)

var balancers = []string{BalanceRoundRobin, BalanceRandom, BalanceWeighted, BalanceSticky}

// Contender is one limiter under test: an algorithm with its parameters,
// and a strategy that says how it is spread over instances.
type Contender struct {
	// Name labels the contender in tables, CSV columns and legends. Default
	// a description such as "sliding_window 4×15s" or "async sliding_log lag 1s".
	Name string `yaml:"name,omitempty"`
	// Algorithm is an algo.Kind name. Default sliding_log for the
	// distributed strategies; required for single.
	Algorithm string `yaml:"algorithm,omitempty"`
	// Burst, InitialTokens, SubWindows, Delay, WarmupPeriod, ColdFactor,
	// MaxBurstSeconds and MaxWait are the algo.Params fields of the same
	// names (defaults as documented there).
	Burst           int64    `yaml:"burst,omitempty"`
	InitialTokens   *int64   `yaml:"initial_tokens,omitempty"`
	SubWindows      int      `yaml:"sub_windows,omitempty"`
	Delay           int64    `yaml:"delay,omitempty"`
	WarmupPeriod    Duration `yaml:"warmup_period,omitempty"`
	ColdFactor      float64  `yaml:"cold_factor,omitempty"`
	MaxBurstSeconds float64  `yaml:"max_burst_seconds,omitempty"`
	MaxWait         Duration `yaml:"max_wait,omitempty"`
	// Hold, for the concurrency algorithm, is how long each admitted request
	// holds its slot before releasing it. Default Period ÷ Limit.
	Hold Duration `yaml:"hold,omitempty"`
	// Strategy is single (default), central, local, sticky, async or lease.
	Strategy string `yaml:"strategy,omitempty"`
	// Instances is K for local, sticky, async and lease. Default the
	// scenario's.
	Instances int `yaml:"instances,omitempty"`
	// Balancer spreads requests over the instances of local, async and
	// lease: round_robin (default), random, weighted (by Weights; missing
	// weights are 1) or sticky (by key, rendezvous hashing). The sticky
	// strategy always balances by key: another balancer there is an error.
	Balancer string `yaml:"balancer,omitempty"`
	// Weights are the instance weights of the weighted balancer (the
	// default balancer when Weights are given). --contender takes them as
	// a comma list: weights=4,1,1.
	Weights []int `yaml:"weights,omitempty"`
	// Share, for local, is how the instances share the limit: split
	// (default: each enforces Limit ÷ K and Burst ÷ K) or full (each
	// enforces the whole Limit, as N copies of a single-process limiter do:
	// up to K × Limit for a key spread over all of them).
	Share string `yaml:"share,omitempty"`
	// RTT is the round trip to the store for central and lease. Default 1ms.
	RTT Duration `yaml:"rtt,omitempty"`
	// Lag is how old the shared counts of async are. Default 1s.
	Lag Duration `yaml:"lag,omitempty"`
	// LeaseSize is the units one lease takes from the store. Default
	// max(1, Limit ÷ (10·K)). A request that costs more goes to the store
	// on its own, as with store/lease.
	LeaseSize int64 `yaml:"lease_size,omitempty"`
	// LeaseTTL is how long a lease's unused units stay usable before they
	// are given back to the store. Default Period ÷ 10.
	LeaseTTL Duration `yaml:"lease_ttl,omitempty"`

	line int
	// written maps each field written in the YAML or the --contender
	// text to its line (0 in a --contender): a field written as 0 is told
	// from one left out, whose 0 means the default.
	written map[string]int
	// flag is the --contender text it came from and flagN which
	// occurrence of --contender (from 1): errors name them instead of
	// contenders[i].
	flag  string
	flagN int
	kind  algo.Kind
	// given is the contender as written, before Validate filled in the
	// defaults: what a report's scenario.yaml holds, so that an automatic
	// name or default follows a rerun's other settings.
	given *Contender
}

// How the local strategy's instances share the limit.
const (
	ShareSplit = "split" // each instance enforces Limit ÷ K
	ShareFull  = "full"  // each instance enforces the whole Limit
)

// MarshalYAML writes the contender as it was written, without the
// defaults Validate filled in.
func (c Contender) MarshalYAML() (any, error) {
	type plain Contender
	if c.given != nil {
		return plain(*c.given), nil
	}
	return plain(c), nil
}

// Event changes the cluster at a point in simulated time.
type Event struct {
	// At is when, from the start of the run.
	At Duration `yaml:"at"`
	// Instances is the new K for every distributed contender.
	Instances int `yaml:"instances"`

	line int
	// flag is the --scale text it came from and flagN which occurrence
	// (from 1), for errors.
	flag  string
	flagN int
}

// Duration is a time.Duration that reads from YAML as "1m30s" or as a number
// of seconds.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) us() int64 { return int64(time.Duration(d) / time.Microsecond) }

// UnmarshalYAML reads "90s", "1m30s", "1.5" (seconds) or 90 (seconds).
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := parseDuration(n.Value)
	if err != nil {
		return lineErr(n.Line, "%v", err)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes d as Go writes durations.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

func parseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) > 1e9 {
			return 0, fmt.Errorf("duration %q out of range", s)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("bad duration %q (want e.g. 90s, 1m30s or a number of seconds)", s)
	}
	return d, nil
}

// Rate is a request rate in units per second. YAML and flags take a number
// (per second) or "N/unit" with unit s, m, h, d or any duration ("5/1m30s").
type Rate float64

// UnmarshalYAML reads a Rate.
func (r *Rate) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseRate(n.Value)
	if err != nil {
		return lineErr(n.Line, "%v", err)
	}
	*r = v
	return nil
}

// ParseRate reads "100", "100/s", "6000/m", "5/1m30s".
func ParseRate(s string) (Rate, error) {
	s = strings.TrimSpace(s)
	num, per, found := strings.Cut(s, "/")
	n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || math.IsNaN(n) || math.IsInf(n, 0) || n < 0 {
		return 0, fmt.Errorf("bad rate %q (want e.g. 100, 100/s or 6000/m)", s)
	}
	if !found {
		return Rate(n), nil
	}
	per = strings.TrimSpace(per)
	units := map[string]time.Duration{"s": time.Second, "sec": time.Second, "m": time.Minute, "min": time.Minute, "h": time.Hour, "d": 24 * time.Hour}
	d, ok := units[per]
	if !ok {
		if d, err = time.ParseDuration(per); err != nil || d <= 0 {
			return 0, fmt.Errorf("bad rate %q: unknown unit %q", s, per)
		}
	}
	return Rate(n / d.Seconds()), nil
}

func lineErr(line int, format string, args ...any) error {
	return fmt.Errorf("%w: line %d: %s", ErrScenario, line, fmt.Sprintf(format, args...))
}

// UnmarshalYAML records the line of a source.
func (s *Source) UnmarshalYAML(n *yaml.Node) error {
	type plain Source
	if err := knownFields(n, plain{}, "traffic source"); err != nil {
		return err
	}
	if err := n.Decode((*plain)(s)); err != nil {
		return err
	}
	s.line = n.Line
	s.written = writtenFields(n)
	return nil
}

// UnmarshalYAML records the line of a contender.
func (c *Contender) UnmarshalYAML(n *yaml.Node) error {
	type plain Contender
	if err := knownFields(n, plain{}, "contender"); err != nil {
		return err
	}
	if err := n.Decode((*plain)(c)); err != nil {
		return err
	}
	c.line = n.Line
	c.written = writtenFields(n)
	return nil
}

// writtenFields maps the keys of mapping n to the lines of their values.
func writtenFields(n *yaml.Node) map[string]int {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	m := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		m[n.Content[i].Value] = n.Content[i+1].Line
	}
	return m
}

// UnmarshalYAML records the line of an event.
func (e *Event) UnmarshalYAML(n *yaml.Node) error {
	type plain Event
	if err := knownFields(n, plain{}, "event"); err != nil {
		return err
	}
	if err := n.Decode((*plain)(e)); err != nil {
		return err
	}
	e.line = n.Line
	return nil
}

// knownFields rejects the keys of mapping n that are not yaml fields of
// proto's struct type: a custom UnmarshalYAML escapes the decoder's
// KnownFields check.
func knownFields(n *yaml.Node, proto any, what string) error {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	t := reflect.TypeOf(proto)
	var names []string
	for i := range t.NumField() {
		if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); tag != "" && tag != "-" {
			names = append(names, tag)
		}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if !slices.Contains(names, k.Value) {
			return lineErr(k.Line, "unknown field %q in %s (known: %s)", k.Value, what, strings.Join(names, ", "))
		}
	}
	return nil
}

// ParseScenario reads a scenario from YAML. file names it in errors, which
// read "file:line: message". Unknown fields are errors. The result is
// validated.
func ParseScenario(file string, data []byte) (*Scenario, error) {
	sc, err := decodeScenario(file, data)
	if err != nil {
		return nil, err
	}
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	return sc, nil
}

func decodeScenario(file string, data []byte) (*Scenario, error) {
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	sc := &Scenario{}
	if err := dec.Decode(sc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: %s: empty scenario", ErrScenario, file)
		}
		return nil, fmt.Errorf("%w: %s:%s", ErrScenario, file, cleanYAMLError(err))
	}
	sc.file = file
	// Which top-level fields are written, to tell a 0 written from one
	// left out (see zeroWritten).
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err == nil && len(doc.Content) > 0 {
		sc.written = writtenFields(doc.Content[0])
	}
	return sc, nil
}

// cleanYAMLError turns yaml's "yaml: line 3: ..." and our wrapped
// "bad scenario: line 3: ..." into "3: ...".
func cleanYAMLError(err error) string {
	msg := err.Error()
	msg = strings.ReplaceAll(msg, ErrScenario.Error()+": ", "")
	msg = strings.TrimPrefix(msg, "yaml: ")
	msg = strings.TrimPrefix(msg, "unmarshal errors:\n  ")
	msg = strings.ReplaceAll(msg, "\n  ", "; ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		return rest
	}
	return " " + msg
}

// withoutLine drops a leading "N: " from a cleaned YAML error, for input
// that did not come from a file.
func withoutLine(msg string) string {
	msg = strings.TrimSpace(msg)
	i := 0
	for i < len(msg) && msg[i] >= '0' && msg[i] <= '9' {
		i++
	}
	if i > 0 && strings.HasPrefix(msg[i:], ": ") {
		return msg[i+2:]
	}
	return msg
}

// LoadScenario reads a scenario file, or a built-in one by name (see
// Presets).
func LoadScenario(nameOrPath string) (*Scenario, error) {
	sc, err := loadScenario(nameOrPath)
	if err != nil {
		return nil, err
	}
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	return sc, nil
}

func loadScenario(nameOrPath string) (*Scenario, error) {
	if data, ok := presetData(nameOrPath); ok {
		return decodeScenario(nameOrPath, data)
	}
	data, err := os.ReadFile(nameOrPath)
	if err != nil {
		return nil, fmt.Errorf("%w: %v (not a file, nor a built-in scenario: %s)", ErrScenario, err, strings.Join(Presets(), ", "))
	}
	return decodeScenario(nameOrPath, data)
}

// where prefixes a validation message with the file and line when known.
func (sc *Scenario) errorf(line int, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	switch {
	case sc.file != "" && line > 0:
		return fmt.Errorf("%w: %s:%d: %s", ErrScenario, sc.file, line, msg)
	case sc.file != "":
		return fmt.Errorf("%w: %s: %s", ErrScenario, sc.file, msg)
	case sc.flags:
		// The message names the flags: "bad scenario" would send the
		// user looking for a YAML file.
		return flagsError(msg)
	}
	return fmt.Errorf("%w: %s", ErrScenario, msg)
}

// flagsError is a bad scenario described by flags: it wraps ErrScenario
// without saying so in its message.
type flagsError string

func (e flagsError) Error() string        { return string(e) }
func (e flagsError) Is(target error) bool { return target == ErrScenario }

// field names a top-level field in an error: its YAML name, or the flag
// that sets it when the scenario came from flags.
func (sc *Scenario) field(name string) string {
	if sc.flags {
		return "--" + name
	}
	return name
}

// required says that a top-level field is missing: "duration: required,
// e.g. duration: 10m", or from flags "--duration is required, e.g.
// --duration 10m".
func (sc *Scenario) required(name, example string) error {
	if sc.flags {
		return sc.errorf(0, "--%s is required, e.g. --%s %s", name, name, example)
	}
	return sc.errorf(0, "%s: required, e.g. %s: %s", name, name, example)
}

// where names field (or, "", the whole contender) of contender i in an
// error: contenders[i].field from YAML, --contender #N "text": field from
// the flag.
func (c *Contender) where(i int, field string) string {
	if c.flag != "" {
		w := fmt.Sprintf("--contender #%d %q", c.flagN, c.flag)
		if field != "" {
			w += ": " + field
		}
		return w
	}
	if field != "" {
		return fmt.Sprintf("contenders[%d].%s", i, field)
	}
	return fmt.Sprintf("contenders[%d]", i)
}

// where names field of event i in an error, as Contender.where does:
// events[i].at, or --scale #N "40s:8": at.
func (e *Event) where(i int, field string) string {
	if e.flag != "" {
		return fmt.Sprintf("--scale #%d %q: %s", e.flagN, e.flag, field)
	}
	return fmt.Sprintf("events[%d].%s", i, field)
}

const maxInstances = 1024
const maxKeys = 1 << 24

// Validate checks the scenario, fills in defaults and compiles every
// contender's algorithm. Each problem is an error wrapping ErrScenario that
// names the field (and file:line for YAML).
func (sc *Scenario) Validate() error {
	if sc.validated {
		return nil
	}
	if sc.Name == "" {
		sc.Name = "sim"
	}
	for _, f := range []struct {
		name string
		zero bool
		hint string
	}{
		{"duration", sc.Duration == 0, "leave duration out for a replay to run to its last request"},
		{"bin", sc.Bin == 0, "leave bin out for the default, 1s (coarser for runs over an hour)"},
		{"instances", sc.Instances == 0, "leave instances out for the default, 4"},
	} {
		if err := sc.zeroWritten(sc.written, f.name, f.zero, "", f.hint); err != nil {
			return err
		}
	}
	if sc.Limit <= 0 {
		return sc.errorf(0, "%s: must be > 0, got %d", sc.field("limit"), sc.Limit)
	}
	if sc.Period <= 0 {
		return sc.required("period", "1m")
	}
	if sc.Period.D() < time.Millisecond {
		return sc.errorf(0, "%s: must be at least 1ms, got %v", sc.field("period"), sc.Period.D())
	}
	if sc.Duration < 0 || sc.Duration.D() > 400*24*time.Hour {
		return sc.errorf(0, "%s: must be between 0 and 400 days, got %v", sc.field("duration"), sc.Duration.D())
	}
	if sc.Instances == 0 {
		sc.Instances = 4
	}
	if sc.Instances < 1 || sc.Instances > maxInstances {
		return sc.errorf(0, "%s: must be between 1 and %d, got %d", sc.field("instances"), maxInstances, sc.Instances)
	}
	if sc.FocusKey < 0 || sc.FocusKey >= maxKeys {
		return sc.errorf(0, "focus_key: must be between 0 and %d, got %d", maxKeys-1, sc.FocusKey)
	}
	if len(sc.Traffic) == 0 {
		return sc.errorf(0, "traffic: at least one source is required")
	}
	replay := false
	for i := range sc.Traffic {
		if err := sc.validateSource(i); err != nil {
			return err
		}
		replay = replay || sc.Traffic[i].Kind == SourceReplay
	}
	if sc.Duration == 0 && !replay {
		return sc.required("duration", "10m")
	}
	if sc.Bin < 0 {
		return sc.errorf(0, "%s: must be > 0, got %v", sc.field("bin"), sc.Bin.D())
	}
	if sc.Bin != 0 && sc.Bin.D() < time.Millisecond {
		return sc.errorf(0, "%s: must be at least 1ms, got %v", sc.field("bin"), sc.Bin.D())
	}
	if sc.Duration > 0 {
		if err := sc.checkBin(); err != nil {
			return err
		}
	}
	for i, e := range sc.Events {
		if e.At < 0 || (sc.Duration > 0 && e.At > sc.Duration) {
			return sc.errorf(e.line, "%s: %v is outside the run", e.where(i, "at"), e.At.D())
		}
		if e.Instances < 1 || e.Instances > maxInstances {
			return sc.errorf(e.line, "%s: must be between 1 and %d, got %d", e.where(i, "instances"), maxInstances, e.Instances)
		}
		if i > 0 && e.At < sc.Events[i-1].At {
			return sc.errorf(e.line, "%s: events must be in time order", e.where(i, "at"))
		}
	}
	// The ideal first: a limit it cannot hold fails every contender too,
	// and this error says why.
	if _, err := sc.idealLimit(); err != nil {
		return err
	}
	if len(sc.Contenders) == 0 {
		sc.Contenders = DefaultContenders(sc.Limit, sc.Period)
	}
	names := map[string]int{}
	for i := range sc.Contenders {
		if err := sc.validateContender(i); err != nil {
			return err
		}
		c := &sc.Contenders[i]
		if _, dup := names[c.Name]; dup && c.given.Name == "" {
			// An automatic name that another contender already has: the
			// settings that differ are not in it; number it.
			base := c.Name
			for n := 2; dup; n++ {
				c.Name = fmt.Sprintf("%s #%d", base, n)
				_, dup = names[c.Name]
			}
		}
		if j, dup := names[c.Name]; dup {
			return sc.errorf(c.line, "%s: %q is already %s; give one of them another name (name: in YAML, name= in --contender)", c.where(i, "name"), c.Name, sc.Contenders[j].where(j, ""))
		}
		names[c.Name] = i
	}
	sc.validated = true
	return nil
}

// checkBin fills in the default bin once the duration is known (a replay's
// is known only when it is read) and bounds the number of points.
func (sc *Scenario) checkBin() error {
	if sc.Bin == 0 {
		sc.Bin = Duration(time.Second)
		if sc.Duration.D() > time.Hour {
			sc.Bin = Duration((sc.Duration.D()/3600 + time.Second - 1).Truncate(time.Second))
		}
	}
	if sc.Duration.D()/sc.Bin.D() > 1_000_000 {
		return sc.errorf(0, "%s: %v gives more than a million points over %v; set a larger bin", sc.field("bin"), sc.Bin.D(), sc.Duration.D())
	}
	return nil
}

func (sc *Scenario) validateSource(i int) error {
	s := &sc.Traffic[i]
	// bad reports a problem with field (or fields, "on/off") of the
	// source: "traffic[0] (flash): at: …" from YAML, "--at: …" from flags.
	bad := func(field, format string, args ...any) error {
		msg := fmt.Sprintf(format, args...)
		if sc.flags {
			return sc.errorf(0, "%s: %s", flagNames(field), msg)
		}
		return sc.errorf(s.line, "traffic[%d] (%s): %s: %s", i, s.Kind, field, msg)
	}
	// name is a field as the user wrote it: rise, or --rise.
	name := func(field string) string {
		if sc.flags {
			return flagNames(field)
		}
		return field
	}
	known := false
	for _, k := range sourceKinds {
		known = known || s.Kind == k
	}
	if !known {
		return sc.errorf(s.line, "traffic[%d].kind: unknown %q (want one of %s)", i, s.Kind, strings.Join(sourceKinds, ", "))
	}
	for _, f := range []struct {
		name string
		zero bool
		hint string
	}{
		{"keys", s.Keys == 0, "leave keys out for the default, 1"},
		{"cost", s.Cost == 0, "leave cost out for the default, 1"},
		{"to", s.To == 0, "leave to out for the source to send until the end of the run"},
		{"cycle", s.Cycle == 0 && s.Kind == SourceDiurnal, "leave cycle out for the default, the source's span"},
		{"decay", s.Decay == 0 && s.Kind == SourceFlash, "leave decay out for the default, rise"},
	} {
		if err := sc.zeroWritten(s.written, f.name, f.zero, fmt.Sprintf("traffic[%d] (%s): ", i, s.Kind), f.hint); err != nil {
			return err
		}
	}
	if s.Keys == 0 {
		s.Keys = 1
	}
	if s.Keys < 0 || s.Keys > maxKeys {
		return bad("keys", "must be between 1 and %d, got %d", maxKeys, s.Keys)
	}
	if s.KeyOffset < 0 || s.KeyOffset+s.Keys > maxKeys {
		return bad("key_offset", "keys must stay below %d", maxKeys)
	}
	if s.Zipf != 0 && !(s.Zipf > 1 && s.Zipf < 100) {
		return bad("zipf", "must be 0 (uniform) or between 1 and 100 exclusive, got %v", s.Zipf)
	}
	if s.Cost == 0 {
		s.Cost = 1
	}
	if s.Cost < 0 || s.Cost > 1<<30 {
		return bad("cost", "must be between 1 and 2^30, got %d", s.Cost)
	}
	if s.From < 0 || s.To < 0 || (s.To > 0 && s.To <= s.From) {
		return bad("from/to", "need 0 <= from < to, got %v and %v", s.From.D(), s.To.D())
	}
	if sc.Duration > 0 && s.From >= sc.Duration {
		return bad("from", "%v is not before the end of the run (%v): the source would send nothing", s.From.D(), sc.Duration.D())
	}
	const maxRate = 1e7
	if s.Rate > maxRate {
		return bad("rate", "at most %g per second", maxRate)
	}
	if s.Peak > maxRate {
		return bad("peak", "at most %g per second", maxRate)
	}
	if s.Process != "" && s.Process != "poisson" && s.Process != "steady" {
		return bad("process", "want poisson or steady, got %q", s.Process)
	}
	if s.Process == "steady" && s.Kind != SourceBursts && s.Kind != SourceSteady {
		return bad("process", "steady applies to steady and bursts only")
	}
	// The fields that shape one kind only are errors on the others, as
	// the flags are: a silent no-op would look like a setting that works.
	for _, f := range []struct {
		field string
		set   bool
		kinds []string
	}{
		{"peak", s.Peak != 0, []string{SourceDiurnal, SourceRamp, SourceFlash}},
		{"on", s.On != 0, []string{SourceBursts}},
		{"off", s.Off != 0, []string{SourceBursts}},
		{"cycle", s.Cycle != 0, []string{SourceDiurnal}},
		{"at", s.At != 0, []string{SourceFlash}},
		{"rise", s.Rise != 0, []string{SourceFlash}},
		{"hold", s.Hold != 0, []string{SourceFlash}},
		{"decay", s.Decay != 0, []string{SourceFlash}},
		{"file", s.File != "", []string{SourceReplay}},
	} {
		if f.set && !slices.Contains(f.kinds, s.Kind) {
			return bad(f.field, "applies to %s traffic only, not %s", strings.Join(f.kinds, ", "), s.Kind)
		}
	}
	// end is when the source stops: the run's end, or To.
	end := sc.Duration
	if s.To > 0 && (end == 0 || s.To < end) {
		end = s.To
	}
	endName := fmt.Sprintf("the end of the run (%s %v)", name("duration"), sc.Duration.D())
	if end != sc.Duration {
		endName = fmt.Sprintf("the source's end (to: %v)", s.To.D())
	}
	switch s.Kind {
	case SourceSteady, SourcePoisson:
		if s.Rate <= 0 {
			return bad("rate", "must be > 0")
		}
	case SourceBursts:
		if s.Rate <= 0 {
			return bad("rate", "must be > 0")
		}
		if s.On <= 0 || s.Off < 0 {
			return bad("on/off", "need on > 0 and off >= 0")
		}
	case SourceDiurnal, SourceRamp, SourceFlash:
		what := map[string]string{
			SourceDiurnal: "the rate swings between rate and peak",
			SourceRamp:    "the rate moves from rate to peak",
			SourceFlash:   "the crowd climbs from rate to peak",
		}[s.Kind]
		if s.Peak <= 0 {
			return bad("peak", "required, > 0: %s (rate defaults to 0; for a constant rate use poisson or steady)", what)
		}
		if s.Rate < 0 {
			return bad("rate", "must be >= 0")
		}
		if s.Kind == SourceDiurnal && s.Cycle < 0 {
			return bad("cycle", "must be > 0")
		}
		if s.Kind != SourceFlash {
			break
		}
		if s.Peak < s.Rate {
			return bad("peak", "must be >= rate (%v), got %v", float64(s.Rate), float64(s.Peak))
		}
		if s.At < 0 || s.Rise < 0 || s.Hold < 0 || s.Decay < 0 {
			return bad("at/rise/hold/decay", "must be >= 0")
		}
		if s.Rise == 0 && s.Hold == 0 && s.Decay == 0 {
			example := "rise: 2s, hold: 5s"
			if sc.flags {
				example = "--rise 2s --hold 5s"
			}
			return bad("rise/hold/decay", "all 0, so the crowd would last no time; set at least one, e.g. %s", example)
		}
		if end > 0 && s.At >= end {
			return bad("at", "%v is not before %s: the crowd would never come", s.At.D(), endName)
		}
		if s.Decay == 0 {
			s.Decay = s.Rise
		}
	case SourceReplay:
		if s.File == "" {
			return bad("file", "required")
		}
	}
	return nil
}

// flagNames turns a source field, or several ("on/off"), into the flags
// that set them: --on/--off; file is --replay.
func flagNames(field string) string {
	parts := strings.Split(field, "/")
	for i, p := range parts {
		if p == "file" {
			p = "replay"
		}
		parts[i] = "--" + p
	}
	return strings.Join(parts, "/")
}

// DefaultContenders is what a scenario without contenders runs, for its
// limit and period: every algorithm on one limiter (the sliding window
// twice: the two-window estimate and 4 sub-windows; smooth_warmup warming
// up over one period) and every distributed strategy over sliding_log. An
// algorithm that cannot hold this limit is left out rather than fail the
// run: smooth_bursty and smooth_warmup above one permit per µs, the 4
// sub-windows when the period does not divide into 4 equal µs.
func DefaultContenders(limit int64, period Duration) []Contender {
	var cs []Contender
	add := func(c Contender) {
		c.kind, _ = algo.ParseKind(c.Algorithm)
		if _, err := c.compile(limit, period); err == nil {
			cs = append(cs, c)
		}
	}
	for _, k := range algo.Kinds() {
		switch k {
		case algo.SmoothWarmup:
			add(Contender{Algorithm: k.String(), WarmupPeriod: period})
		case algo.SlidingWindow:
			add(Contender{Algorithm: k.String()})
			add(Contender{Algorithm: k.String(), SubWindows: 4})
		default:
			add(Contender{Algorithm: k.String()})
		}
	}
	for _, s := range strategies[1:] {
		cs = append(cs, Contender{Strategy: s})
	}
	return cs
}

func (sc *Scenario) validateContender(i int) error {
	c := &sc.Contenders[i]
	given := *c
	given.given = nil
	c.given = &given
	bad := func(field, format string, args ...any) error {
		return sc.errorf(c.line, "%s: %s", c.where(i, field), fmt.Sprintf(format, args...))
	}
	if c.Strategy == "" {
		c.Strategy = StrategySingle
	}
	if !slices.Contains(strategies, c.Strategy) {
		return bad("strategy", "unknown %q (want one of %s)", c.Strategy, strings.Join(strategies, ", "))
	}
	if c.Algorithm == "" {
		if c.Strategy == StrategySingle {
			return bad("algorithm", "required: the single strategy runs one algorithm, e.g. \"single algorithm=gcra\" (or just \"gcra\"); one of %s", kindNames())
		}
		c.Algorithm = algo.SlidingLog.String()
	}
	k, err := algo.ParseKind(c.Algorithm)
	if err != nil {
		return bad("algorithm", "%v", err)
	}
	c.kind = k
	if field, why := c.ignored(); field != "" {
		return bad(field, "%s", why)
	}
	if field, why := c.writtenZero(); field != "" {
		line := c.line
		if l := c.written[field]; l > 0 {
			line = l
		}
		return sc.errorf(line, "%s: %s", c.where(i, field), why)
	}
	if c.Instances < 0 || c.Instances > maxInstances {
		return bad("instances", "must be between 1 and %d, got %d", maxInstances, c.Instances)
	}
	if c.Strategy != StrategySingle && c.Strategy != StrategyCentral && c.Instances == 0 {
		c.Instances = sc.Instances
	}
	switch {
	case c.Strategy == StrategySticky:
		c.Balancer = BalanceSticky
	case c.Balancer == "" && len(c.Weights) > 0:
		c.Balancer = BalanceWeighted
	case c.Balancer == "" && c.Instances > 0:
		c.Balancer = BalanceRoundRobin
	}
	if c.Balancer != "" && !slices.Contains(balancers, c.Balancer) {
		return bad("balancer", "unknown %q (want one of %s)", c.Balancer, strings.Join(balancers, ", "))
	}
	if c.Share != "" && c.Share != ShareSplit && c.Share != ShareFull {
		return bad("share", "want %s (each instance enforces limit ÷ K) or %s (each enforces the whole limit), got %q", ShareSplit, ShareFull, c.Share)
	}
	if c.Strategy == StrategyLocal && c.Share == "" {
		c.Share = ShareSplit
	}
	for j, w := range c.Weights {
		if w < 0 || w > 1_000_000 {
			return bad("weights", "weights[%d] must be between 0 and 1000000, got %d", j, w)
		}
	}
	for _, f := range []struct {
		name string
		neg  bool
	}{{"rtt", c.RTT < 0}, {"lag", c.Lag < 0}, {"lease_size", c.LeaseSize < 0}, {"lease_ttl", c.LeaseTTL < 0}, {"hold", c.Hold < 0}} {
		if f.neg {
			return bad(f.name, "must not be negative")
		}
	}
	switch c.Strategy {
	case StrategyCentral:
		if c.RTT == 0 {
			c.RTT = Duration(time.Millisecond)
		}
	case StrategyAsync:
		if c.Lag == 0 {
			c.Lag = Duration(time.Second)
		}
	case StrategyLease:
		if c.RTT == 0 {
			c.RTT = Duration(time.Millisecond)
		}
		if !leasable(c.kind) {
			break
		}
		if c.LeaseSize == 0 {
			c.LeaseSize = max(1, sc.Limit/int64(10*c.Instances))
		}
		if c.LeaseTTL == 0 {
			c.LeaseTTL = Duration(max(sc.Period.D()/10, time.Microsecond))
		}
	}
	if c.WarmupPeriod == 0 && c.kind == algo.SmoothWarmup {
		// As in DefaultContenders: warm up over one period.
		c.WarmupPeriod = sc.Period
	}
	if c.Hold == 0 && c.kind == algo.Concurrency {
		c.Hold = Duration(max(sc.Period.D()/time.Duration(sc.Limit), time.Microsecond))
	}
	if c.Strategy == StrategyAsync {
		switch c.kind {
		case algo.FixedWindow, algo.SlidingWindow, algo.SlidingLog:
		default:
			return bad("algorithm", "the async strategy shares counts, so it needs a counting algorithm (fixed_window, sliding_window or sliding_log), not %s", c.kind)
		}
	}
	if c.Strategy != StrategySingle && c.kind == algo.Concurrency {
		return bad("algorithm", "concurrency is simulated on one limiter only (strategy single)")
	}
	if _, err := c.compile(sc.Limit, sc.Period); err != nil {
		return bad("algorithm", "%v", err)
	}
	if c.Strategy == StrategyLocal && c.Share == ShareSplit {
		if _, err := c.compile(max(1, sc.Limit/int64(c.Instances)), sc.Period); err != nil {
			return bad("algorithm", "limit ÷ %s: %v", count(c.Instances, "instance"), err)
		}
	}
	if c.Name == "" {
		c.Name = c.describe(sc)
	}
	if strings.ContainsAny(c.Name, ",\n\r\"") {
		return bad("name", "must not contain commas, quotes or newlines: %q", c.Name)
	}
	return nil
}

// has reports whether field is set: written (even as 0, in YAML or a
// --contender) or, for a Contender built in Go, nonZero.
func (c *Contender) has(field string, nonZero bool) bool {
	_, ok := c.written[field]
	return ok || nonZero
}

// algoFields are the contender's algo.Params fields, each with the
// algorithms it applies to (as algo.Compile checks them when not 0).
var algoFields = map[string][]algo.Kind{
	"burst":             {algo.TokenBucket, algo.GCRA, algo.Shaper},
	"sub_windows":       {algo.SlidingWindow},
	"delay":             {algo.Shaper},
	"warmup_period":     {algo.SmoothWarmup},
	"cold_factor":       {algo.SmoothWarmup},
	"max_burst_seconds": {algo.SmoothBursty},
	"max_wait":          {algo.SmoothBursty, algo.SmoothWarmup},
}

// writtenZero names a field written as 0 (in YAML or a --contender) whose
// 0 means "the default" when it is left out, and says why it is refused:
// the default would silently replace the 0 asked for, as lease_size=0
// once became a lease of max(1, limit ÷ 10K). It also refuses an
// algorithm's field written as 0 for an algorithm it does not apply to,
// which algo.Compile cannot tell from one left out. "" when there is none.
// A Contender built in Go has no written fields: its 0s are the defaults.
func (c *Contender) writtenZero() (field, why string) {
	for _, name := range slices.Sorted(maps.Keys(algoFields)) {
		kinds := algoFields[name]
		if _, ok := c.written[name]; ok && !slices.Contains(kinds, c.kind) {
			names := make([]string, len(kinds))
			for i, k := range kinds {
				names[i] = k.String()
			}
			return name, fmt.Sprintf("applies to %s only, not %s", strings.Join(names, ", "), c.kind)
		}
	}
	bucket := c.kind == algo.TokenBucket || c.kind == algo.GCRA
	for _, f := range []struct {
		name string
		zero bool
		dflt string
	}{
		{"instances", c.Instances == 0, "the scenario's instances"},
		{"rtt", c.RTT == 0, "1ms"},
		{"lag", c.Lag == 0, "1s"},
		{"lease_size", c.LeaseSize == 0, "max(1, limit ÷ (10 × instances))"},
		{"lease_ttl", c.LeaseTTL == 0, "period ÷ 10"},
		{"hold", c.Hold == 0, "period ÷ limit"},
		{"burst", c.Burst == 0 && bucket, "a capacity of limit"},
		{"sub_windows", c.SubWindows == 0, "1, the two-window estimate"},
		{"warmup_period", c.WarmupPeriod == 0, "one period"},
		{"cold_factor", c.ColdFactor == 0, "3"},
		{"max_burst_seconds", c.MaxBurstSeconds == 0, "1"},
	} {
		if _, ok := c.written[f.name]; ok && f.zero {
			return f.name, fmt.Sprintf("must be > 0, got 0; leave %s out for the default, %s", f.name, f.dflt)
		}
	}
	return "", ""
}

// ignored names a setting c's strategy (or algorithm) does not use, and
// says why; "" when every setting given applies. Checked before the
// defaults are filled in, so only settings the user wrote are reported
// (see has).
func (c *Contender) ignored() (field, why string) {
	st := c.Strategy
	cluster := st != StrategySingle && st != StrategyCentral
	lease := ""
	switch {
	case c.has("lease_size", c.LeaseSize != 0):
		lease = "lease_size"
	case c.has("lease_ttl", c.LeaseTTL != 0):
		lease = "lease_ttl"
	}
	switch {
	case c.has("instances", c.Instances != 0) && !cluster:
		return "instances", fmt.Sprintf("the %s strategy decides every request on one limiter, so instances does not apply", st)
	case c.Balancer != "" && !cluster:
		return "balancer", fmt.Sprintf("the %s strategy decides every request on one limiter, so balancer does not apply", st)
	case c.Balancer != "" && c.Balancer != BalanceSticky && st == StrategySticky:
		return "balancer", fmt.Sprintf("the sticky strategy always balances by key (balancer sticky), so balancer %s would be ignored; for instances that each enforce the whole limit behind a %s balancer, use \"local share=full balancer=%s\"", c.Balancer, c.Balancer, c.Balancer)
	case len(c.Weights) > 0 && c.Balancer != "" && c.Balancer != BalanceWeighted:
		return "weights", fmt.Sprintf("weights apply to the weighted balancer only, not %s", c.Balancer)
	case len(c.Weights) > 0 && !cluster:
		return "weights", fmt.Sprintf("the %s strategy has no load balancer, so weights do not apply", st)
	case len(c.Weights) > 0 && st == StrategySticky:
		return "weights", "the sticky strategy balances by key, so weights do not apply"
	case c.Share != "" && st != StrategyLocal:
		return "share", fmt.Sprintf("share applies to the local strategy only, not %s", st)
	case c.has("rtt", c.RTT != 0) && st != StrategyCentral && st != StrategyLease:
		return "rtt", fmt.Sprintf("rtt applies to the central and lease strategies only, not %s", st)
	case c.has("lag", c.Lag != 0) && st != StrategyAsync:
		return "lag", fmt.Sprintf("lag applies to the async strategy only, not %s", st)
	case lease != "" && st != StrategyLease:
		return lease, fmt.Sprintf("lease_size and lease_ttl apply to the lease strategy only, not %s", st)
	case lease != "" && !leasable(c.kind):
		return lease, fmt.Sprintf("store/lease does not lease %s (its admitted requests carry a delay that depends on when they arrive): every request goes to the store, so lease_size and lease_ttl do not apply", c.kind)
	case c.has("hold", c.Hold != 0) && c.kind != algo.Concurrency:
		return "hold", fmt.Sprintf("hold applies to the concurrency algorithm only, not %s", c.kind)
	}
	return "", ""
}

// compile builds the contender's algo.Limit for the given limit and period.
func (c *Contender) compile(limit int64, period Duration) (*algo.Limit, error) {
	return algo.Compile(algo.Params{
		Algorithm:       c.kind,
		Limit:           limit,
		Period:          period.D(),
		Burst:           c.Burst,
		InitialTokens:   c.InitialTokens,
		SubWindows:      c.SubWindows,
		Delay:           c.Delay,
		WarmupPeriod:    c.WarmupPeriod.D(),
		ColdFactor:      c.ColdFactor,
		MaxBurstSeconds: c.MaxBurstSeconds,
		MaxWait:         c.MaxWait.D(),
	})
}

// describe names a contender from its settings: the algorithm with its
// main parameter, the strategy with K, its round trip, lag or lease, and
// the load balancer when it is not round robin.
func (c *Contender) describe(sc *Scenario) string {
	name := c.kind.String()
	switch c.kind {
	case algo.SlidingWindow:
		n := max(c.SubWindows, 1)
		name += fmt.Sprintf(" %d×%v", n, fmtDur(sc.Period.D()/time.Duration(n)))
	case algo.TokenBucket, algo.GCRA, algo.Shaper:
		if c.Burst != 0 {
			name += fmt.Sprintf(" burst %d", c.Burst)
		}
	}
	lb := ""
	switch {
	case c.Balancer == BalanceWeighted && len(c.Weights) > 0:
		ws := make([]string, len(c.Weights))
		for i, w := range c.Weights {
			ws[i] = strconv.Itoa(w)
		}
		lb = " weighted " + strings.Join(ws, ":")
	case c.Balancer != "" && c.Balancer != BalanceRoundRobin && c.Strategy != StrategySticky:
		lb = " " + c.Balancer
	}
	switch c.Strategy {
	case StrategySingle:
		return name
	case StrategyCentral:
		return fmt.Sprintf("central %s rtt %v", name, fmtDur(c.RTT.D()))
	case StrategyLocal:
		if c.Share == ShareFull {
			return fmt.Sprintf("local %s full K=%d%s", name, c.Instances, lb)
		}
		return fmt.Sprintf("local %s ÷%d%s", name, c.Instances, lb)
	case StrategySticky:
		return fmt.Sprintf("sticky %s K=%d", name, c.Instances)
	case StrategyAsync:
		return fmt.Sprintf("async %s lag %v%s", name, fmtDur(c.Lag.D()), lb)
	case StrategyLease:
		if !leasable(c.kind) {
			return fmt.Sprintf("lease %s forwarded%s", name, lb)
		}
		return fmt.Sprintf("lease %s %d/lease%s", name, c.LeaseSize, lb)
	}
	return name
}

// fmtDur prints a duration without trailing zero units: 1m, 15s, 250ms.
func fmtDur(d time.Duration) string {
	s := d.String()
	for _, suf := range []string{"m0s", "h0m"} {
		if strings.HasSuffix(s, suf) {
			s = strings.TrimSuffix(s, suf[1:])
		}
	}
	return s
}

// idealLimit compiles the perfect sliding window the contenders are judged
// against: the real sliding log with the scenario's limit.
func (sc *Scenario) idealLimit() (*algo.Limit, error) {
	l, err := algo.Compile(algo.Params{Algorithm: algo.SlidingLog, Limit: sc.Limit, Period: sc.Period.D()})
	if err != nil {
		hint := ""
		if sc.Limit > 1<<20 {
			// algo's advice, to use sliding_window, is no way out here:
			// the ideal is always the sliding log.
			hint = "; the ideal is always the sliding log: to study a larger limit, divide the limit, the rates and the costs by the same factor"
		}
		return nil, sc.errorf(0, "%s: the perfect sliding window (sliding_log) cannot hold it: %v%s", sc.field("limit"), err, hint)
	}
	return l, nil
}

// kindNames lists the algorithms a contender may run.
func kindNames() string {
	names := make([]string, 0, len(algo.Kinds()))
	for _, k := range algo.Kinds() {
		names = append(names, k.String())
	}
	return strings.Join(names, ", ")
}
