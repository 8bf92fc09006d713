package sim

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate/floodgate/internal/names"
)

const usage = `usage: floodgate sim [flags]

Simulates traffic through Floodgate's real algorithms and through the
distributed strategies, and measures each against a perfect sliding window.
Prints a table; with --out, writes a report folder (index.html, SVG and PNG
charts, series.csv). The same --seed gives byte-identical output.

Either a scenario (a YAML file, or a built-in name: %s) or flags;
with neither, the built-in article scenario runs:

  floodgate sim
  floodgate sim --scenario article --out report/
  floodgate sim --traffic poisson --rate 120/m --limit 100 --period 1m \
      --duration 10m --contender fixed_window --contender "sliding_window sub_windows=4"
  floodgate sim --replay access.log --limit 10 --period 1s --contender "async lag=500ms"

A --contender is an algorithm or a strategy (single, central, local, sticky,
async, lease) followed by key=value settings named as in the scenario YAML,
e.g. "token_bucket burst=20", "lease algorithm=gcra lease_size=50 rtt=2ms"
or "local share=full balancer=weighted weights=4,1,1" (lists comma-separated).
A setting the strategy would ignore is an error.

Flags:
`

// DefaultScenario is the built-in scenario `floodgate sim` runs when no
// flag describes a run: the algorithms' accuracy comparison.
const DefaultScenario = "article"

// Main is the `floodgate sim` command: it parses args (without the command
// name), runs the simulation and writes the table to stdout, progress and
// errors to stderr. It returns the exit code: 0 on success, 1 when the run
// fails, 2 on bad usage.
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return MainContext(ctx, args, stdout, stderr)
}

// MainContext is Main under the caller's context: an interrupted run stops
// early and fails.
func MainContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	// The flag package's own message is replaced by one that names the
	// command and the flag the user probably meant, as the other
	// subcommands' are.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	printUsage := func() {
		fmt.Fprintf(stderr, usage, strings.Join(Presets(), ", "))
		fs.SetOutput(stderr)
		fs.PrintDefaults()
	}
	var (
		scenario    = fs.String("scenario", "", "scenario YAML file or built-in name")
		out         = fs.String("out", "", "write the report folder here (HTML, SVG, PNG, CSV)")
		csvPath     = fs.String("csv", "", "write the series CSV to this file ('-' for stdout instead of the table)")
		seed        = fs.String("seed", "", "random seed (overrides the scenario's; default 1)")
		progressArg = fs.String("progress", "auto", "progress bar on stderr: auto (when stderr is a terminal), always, never")
		duration    = fs.String("duration", "", "simulated time, e.g. 10m")
		bin         = fs.String("bin", "", "resolution of the series, e.g. 1s")
		limit       = fs.Int64("limit", 0, "units per period per key")
		period      = fs.String("period", "", "window of the limit, e.g. 1m")
		instances   = fs.Int("instances", 0, "instances K behind the load balancer (default 4)")
		traffic     = fs.String("traffic", "", "traffic kind: steady, poisson, bursts, diurnal, ramp, flash")
		rate        = fs.String("rate", "", "request rate, e.g. 100 (per second) or 6000/m")
		peak        = fs.String("peak", "", "peak rate of diurnal, ramp and flash")
		keys        = fs.Int("keys", 0, "number of clients (keys)")
		zipf        = fs.Float64("zipf", 0, "Zipf exponent (> 1) of the key mix; 0 for uniform")
		cost        = fs.Int64("cost", 0, "units per request (default 1)")
		on          = fs.String("on", "", "burst length for --traffic bursts")
		off         = fs.String("off", "", "pause length for --traffic bursts")
		at          = fs.String("at", "", "start of the flash crowd")
		rise        = fs.String("rise", "", "rise time of the flash crowd")
		hold        = fs.String("hold", "", "how long the flash crowd stays at its peak")
		replay      = fs.String("replay", "", "replay a log file (lines: time key [cost])")
		scaleOut    scaleFlags
		contenders  contenderFlags
	)
	fs.Var(&scaleOut, "scale", "scale event AT:K, e.g. 30s:8 (repeatable)")
	fs.Var(&contenders, "contender", "a contender, e.g. \"sliding_window sub_windows=4\" (repeatable; default every algorithm and strategy, smooth_warmup warming up over one --period)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage()
			return 0
		}
		if msg := err.Error(); strings.HasPrefix(msg, "invalid ") || strings.HasPrefix(msg, "flag needs an argument: ") {
			// A flag that exists, given a bad value or none: one line,
			// as the other subcommands say it, without the usage that
			// would scroll it away.
			fmt.Fprintf(stderr, "floodgate sim: %v (floodgate sim -h lists the flags)\n", err)
			return 2
		}
		fmt.Fprintf(stderr, "floodgate sim: %v%s\n", err, names.FlagHint(fs, err))
		printUsage()
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "floodgate sim: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "floodgate sim: %v\n", err)
		return 1
	}

	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	trafficFlags := []string{"traffic", "rate", "peak", "keys", "zipf", "cost", "on", "off", "at", "rise", "hold", "replay"}
	if *scenario == "" && !set["limit"] && !set["period"] && !slices.ContainsFunc(trafficFlags, func(n string) bool { return set[n] }) {
		// Nothing describes a run: show the built-in comparison (a
		// 10-minute simulation that takes milliseconds) rather than fail.
		*scenario = DefaultScenario
		fmt.Fprintf(stderr, "floodgate sim: no --scenario, --limit or --traffic: running the built-in %q scenario (built-ins: --scenario %s; or describe a run with --traffic, --rate, --limit and --period; --help for every flag)\n",
			DefaultScenario, strings.Join(Presets(), "|"))
	}
	var sc *Scenario
	if *scenario != "" {
		var err error
		if sc, err = loadScenario(*scenario); err != nil {
			return fail(err)
		}
	} else {
		sc = &Scenario{Name: "flags", Seed: 1}
		src := Source{Kind: *traffic}
		if *replay != "" {
			src = Source{Kind: SourceReplay, File: *replay}
		} else if src.Kind == "" {
			src.Kind = SourcePoisson
		}
		if err := applyFlags(&src, map[string]string{"rate": *rate, "peak": *peak, "on": *on, "off": *off, "at": *at, "rise": *rise, "hold": *hold}); err != nil {
			return fail(err)
		}
		src.Keys, src.Zipf, src.Cost = *keys, *zipf, *cost
		sc.Traffic = []Source{src}
		if err := flagsApply(src.Kind, set); err != nil {
			return fail(err)
		}
		// 0 is the YAML's "unset"; given as a flag it is a mistake.
		if set["keys"] && *keys < 1 {
			return fail(fmt.Errorf("--keys: must be between 1 and %d, got %d", maxKeys, *keys))
		}
		if set["cost"] && *cost < 1 {
			return fail(fmt.Errorf("--cost: must be between 1 and 2^30, got %d", *cost))
		}
	}
	if *scenario != "" {
		for _, name := range trafficFlags {
			if set[name] {
				return fail(fmt.Errorf("--%s describes traffic; with --scenario, edit the scenario's traffic instead", name))
			}
		}
	}
	if set["seed"] {
		s, err := strconv.ParseUint(*seed, 10, 64)
		if err != nil {
			return fail(fmt.Errorf("--seed: want a non-negative integer, got %q", *seed))
		}
		sc.Seed = s
	}
	for name, dst := range map[string]*Duration{"duration": &sc.Duration, "bin": &sc.Bin, "period": &sc.Period} {
		if !set[name] {
			continue
		}
		v := map[string]string{"duration": *duration, "bin": *bin, "period": *period}[name]
		d, err := parseDuration(v)
		if err != nil {
			return fail(fmt.Errorf("--%s: %v", name, err))
		}
		*dst = Duration(d)
	}
	if set["limit"] {
		sc.Limit = *limit
	}
	if *scenario == "" && (!set["limit"] || !set["period"]) {
		missing := "--limit"
		if set["limit"] {
			missing = "--period"
		}
		return fail(fmt.Errorf("%s is required without --scenario: describe the run with --limit N --period D (e.g. --limit 100 --period 1m) and --traffic, or run a built-in scenario: --scenario %s", missing, strings.Join(Presets(), "|")))
	}
	if set["instances"] {
		if *instances < 1 {
			return fail(fmt.Errorf("--instances: must be between 1 and %d, got %d", maxInstances, *instances))
		}
		sc.Instances = *instances
	}
	if len(scaleOut) > 0 {
		sc.Events = scaleOut
	}
	if len(contenders) > 0 {
		sc.Contenders = contenders
	}
	if err := sc.Validate(); err != nil {
		return fail(err)
	}

	var opts []Option
	if *out != "" {
		opts = append(opts, WithWorstKeyWindows())
	}
	switch *progressArg {
	case "always":
		opts = append(opts, WithProgress(stderr))
	case "auto":
		if isTerminal(stderr) {
			opts = append(opts, WithProgress(stderr))
		}
	case "never":
	default:
		return fail(fmt.Errorf("--progress: want auto, always or never, got %q", *progressArg))
	}
	start := time.Now()
	res, err := Run(ctx, sc, opts...)
	if err != nil {
		return fail(err)
	}
	if *csvPath == "-" {
		if err := WriteCSV(stdout, res); err != nil {
			return fail(err)
		}
	} else {
		if err := WriteTable(stdout, res); err != nil {
			return fail(err)
		}
		if *csvPath != "" {
			f, err := os.Create(*csvPath)
			if err != nil {
				return fail(err)
			}
			err = WriteCSV(f, res)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fail(err)
			}
		}
	}
	if *out != "" {
		if err := WriteReport(*out, res); err != nil {
			return fail(err)
		}
		fmt.Fprintf(stderr, "report written to %s/index.html\n", strings.TrimRight(*out, "/"))
	}
	fmt.Fprintf(stderr, "simulated %d requests × %d contenders in %v\n", res.Offered.Metrics.Requests, len(res.Contenders)+1, time.Since(start).Round(time.Millisecond))
	return 0
}

// flagsApply rejects the traffic flags set that the traffic kind would
// ignore, and the zero values a flag cannot mean.
func flagsApply(kind string, set map[string]bool) error {
	if kind == SourceReplay {
		for _, name := range []string{"traffic", "rate", "peak", "keys", "zipf", "cost", "on", "off", "at", "rise", "hold"} {
			if set[name] {
				return fmt.Errorf("--%s does not apply to --replay: the log gives each request's time, key and cost", name)
			}
		}
		return nil
	}
	only := map[string][]string{
		"on": {SourceBursts}, "off": {SourceBursts},
		"peak": {SourceDiurnal, SourceRamp, SourceFlash},
		"at":   {SourceFlash}, "rise": {SourceFlash}, "hold": {SourceFlash},
	}
	for _, name := range []string{"peak", "on", "off", "at", "rise", "hold"} {
		if set[name] && !slices.Contains(only[name], kind) {
			return fmt.Errorf("--%s applies to --traffic %s only, not %s", name, strings.Join(only[name], ", "), kind)
		}
	}
	return nil
}

// applyFlags sets the named source fields that are non-empty, reading them
// as YAML would.
func applyFlags(src *Source, vals map[string]string) error {
	for _, name := range []string{"rate", "peak", "on", "off", "at", "rise", "hold"} {
		v := vals[name]
		if v == "" {
			continue
		}
		var err error
		switch name {
		case "rate":
			src.Rate, err = ParseRate(v)
		case "peak":
			src.Peak, err = ParseRate(v)
		default:
			var d time.Duration
			d, err = parseDuration(v)
			*map[string]*Duration{"on": &src.On, "off": &src.Off, "at": &src.At, "rise": &src.Rise, "hold": &src.Hold}[name] = Duration(d)
		}
		if err != nil {
			return fmt.Errorf("--%s: %v", name, err)
		}
	}
	return nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// scaleFlags collects --scale AT:K.
type scaleFlags []Event

// String is flag.Value's; the default is empty.
func (s *scaleFlags) String() string { return "" }

// Set adds one scale event.
func (s *scaleFlags) Set(v string) error {
	at, k, ok := strings.Cut(v, ":")
	if !ok {
		return fmt.Errorf("want AT:K, e.g. 30s:8, got %q", v)
	}
	d, err := parseDuration(at)
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(k)
	if err != nil {
		return fmt.Errorf("instances %q: want an integer", k)
	}
	*s = append(*s, Event{At: Duration(d), Instances: n})
	return nil
}

// contenderFlags collects --contender "KIND key=value ...".
type contenderFlags []Contender

// String is flag.Value's; the default is empty.
func (c *contenderFlags) String() string { return "" }

// Set adds one contender.
func (c *contenderFlags) Set(v string) error {
	ct, err := ParseContender(v)
	if err != nil {
		return err
	}
	*c = append(*c, ct)
	return nil
}

// ParseContender reads a contender from the flag form "KIND key=value ...":
// KIND is an algorithm (a single limiter) or a strategy (over sliding_log
// unless algorithm= says otherwise); keys are the YAML field names.
func ParseContender(s string) (Contender, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return Contender{}, fmt.Errorf("%w: empty contender", ErrScenario)
	}
	m := &yaml.Node{Kind: yaml.MappingNode}
	add := func(k, v string) {
		m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: k}, &yaml.Node{Kind: yaml.ScalarNode, Value: v})
	}
	isStrategy := false
	for _, st := range strategies {
		isStrategy = isStrategy || fields[0] == st
	}
	if isStrategy {
		add("strategy", fields[0])
	} else {
		add("algorithm", fields[0])
	}
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(f, "=")
		if !ok || k == "" {
			return Contender{}, fmt.Errorf("%w: contender %q: want key=value, got %q", ErrScenario, s, f)
		}
		if k == "weights" {
			// A comma list, as YAML's flow form without the brackets:
			// weights=4,1,1 (or [4,1,1]).
			seq := &yaml.Node{Kind: yaml.SequenceNode}
			for _, w := range strings.Split(strings.Trim(v, "[]"), ",") {
				seq.Content = append(seq.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: w})
			}
			m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: k}, seq)
			continue
		}
		add(k, v)
	}
	var data strings.Builder
	enc := yaml.NewEncoder(&data)
	if err := enc.Encode(m); err != nil {
		return Contender{}, fmt.Errorf("%w: contender %q: %v", ErrScenario, s, err)
	}
	dec := yaml.NewDecoder(strings.NewReader(data.String()))
	dec.KnownFields(true)
	var c Contender
	if err := dec.Decode(&c); err != nil {
		return Contender{}, fmt.Errorf("%w: contender %q: %s", ErrScenario, s, withoutLine(cleanYAMLError(err)))
	}
	c.line = 0
	return c, nil
}
