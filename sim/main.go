package sim

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate/floodgate/internal/names"
	"github.com/floodgate/floodgate/internal/term"
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

Without --scenario, --limit and --period are required, and so is --duration
unless --replay gives the requests (the run then lasts to the log's last
request, rounded up to a second). The traffic (default poisson) needs:
  steady, poisson   --rate
  bursts            --rate and --on (--off defaults to 0)
  diurnal           --peak (--rate, the low point, defaults to 0;
                    --cycle to the run's duration)
  ramp              --peak, the end rate (--rate, the start, defaults to 0)
  flash             --peak and one of --rise, --hold, --decay (--rate
                    defaults to 0, --at to the start, --decay to --rise);
                    --at must fall inside the run
A flag the chosen traffic would ignore is an error, and so is 0 for a flag
whose 0 would mean "unset" (--keys, --cost, --instances, --duration, --bin,
--period, --cycle, --decay, --on).

A --contender is an algorithm or a strategy (single, central, local, sticky,
async, lease) followed by key=value settings named as in the scenario YAML,
e.g. "token_bucket burst=20", "lease algorithm=gcra lease_size=50 rtt=2ms"
or "local share=full balancer=weighted weights=4,1,1" (lists comma-separated;
instances past the weights given weigh 1, weights past K are unused).
A setting the strategy would ignore is an error, and so is 0 for a
setting whose 0 would mean its default (lease_size=0, lease_ttl=0, rtt=0,
lag=0, instances=0, hold=0; leave it out for the default).

Durations take a unit, in flags and --contender settings alike: 90s,
1m30s, 500ms (0 needs none). A scenario's YAML also reads a bare number
as seconds.

Exit status: 0 on success, 2 for a mistake in the flags or the scenario
(its YAML, its replay log), 1 when the run or writing its output fails,
130 when interrupted (Ctrl-C, SIGTERM), saying how far the run got.

Flags:
`

// DefaultScenario is the built-in scenario `floodgate sim` runs when no
// flag describes a run: the algorithms' accuracy comparison.
const DefaultScenario = "article"

// exitInterrupted is the exit code of a run interrupted (Ctrl-C, or
// SIGTERM under the floodgate command), as floodgate bench's and a shell's
// for a command stopped by Ctrl-C.
const exitInterrupted = 130

// errUsage marks a mistake in the flags: Main exits 2 for it, as for a bad
// scenario (ErrScenario).
var errUsage = errors.New("usage")

// usageErrorf is a mistake in the flags; the message is printed as is.
func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

type usageError struct{ error }

func (e usageError) Is(target error) bool { return target == errUsage }

// Main is the `floodgate sim` command: it parses args (without the command
// name), runs the simulation and writes the table to stdout, progress and
// errors to stderr. It returns the exit code: 0 on success, 2 on bad usage
// (a mistake in the flags or in the scenario: its YAML, its values, its
// replay log), 1 when the run fails (the table, CSV or report cannot be
// written), 130 when interrupted (stderr says how far the run got; only a
// run interrupted in --out's second pass, whole by then, writes its table
// and CSV, without the report).
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return MainContext(ctx, args, stdout, stderr)
}

// trafficFlags are the flags that describe the traffic.
var trafficFlags = []string{"traffic", "rate", "peak", "keys", "zipf", "cost", "on", "off", "cycle", "at", "rise", "hold", "decay", "replay"}

// MainContext is Main under the caller's context: a run interrupted by
// ctx stops early and exits 130.
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
		duration    = fs.String("duration", "", "simulated time, e.g. 10m (required without --scenario, unless --replay)")
		bin         = fs.String("bin", "", "resolution of the series, e.g. 1s (default 1s, or duration/3600 rounded up to a second for runs over an hour; at most a million bins)")
		limit       = fs.Int64("limit", 0, "units per period per key (required without --scenario)")
		period      = fs.String("period", "", "window of the limit, e.g. 1m (required without --scenario)")
		instances   = fs.Int("instances", 0, "instances K behind the load balancer (default 4)")
		traffic     = fs.String("traffic", "", "traffic kind: steady, poisson, bursts, diurnal, ramp, flash (default poisson)")
		rate        = fs.String("rate", "", "request rate, e.g. 100 (per second) or 6000/m: the rate of steady and poisson, during a burst, the low point of diurnal and flash, the start of ramp (default 0 for those three)")
		peak        = fs.String("peak", "", "peak rate of diurnal and flash, end rate of ramp (required for those three)")
		keys        = fs.Int("keys", 0, "number of clients (keys) (default 1)")
		zipf        = fs.Float64("zipf", 0, "Zipf exponent (> 1) of the key mix; 0 for uniform")
		cost        = fs.Int64("cost", 0, "units per request (default 1)")
		on          = fs.String("on", "", "burst length for --traffic bursts (required for it)")
		off         = fs.String("off", "", "pause length for --traffic bursts (default 0)")
		cycle       = fs.String("cycle", "", "period of the swing of --traffic diurnal (default the run's duration)")
		at          = fs.String("at", "", "start of the flash crowd, before the end of the run (default 0)")
		rise        = fs.String("rise", "", "rise time of the flash crowd (default 0)")
		hold        = fs.String("hold", "", "how long the flash crowd stays at its peak (default 0)")
		decay       = fs.String("decay", "", "time constant of the flash crowd's decay back to --rate (default --rise)")
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
	// fail reports err and returns the exit code: 2 for a mistake in the
	// flags or the scenario, 1 for a run that failed.
	fail := func(err error) int {
		fmt.Fprintf(stderr, "floodgate sim: %v\n", err)
		if errors.Is(err, errUsage) || errors.Is(err, ErrScenario) {
			return 2
		}
		return 1
	}

	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var opts []Option
	if *out != "" {
		opts = append(opts, WithWorstKeyWindows())
	}
	switch *progressArg {
	case "always":
		opts = append(opts, WithProgress(stderr))
	case "auto":
		if term.IsTerminal(stderr) {
			opts = append(opts, WithProgress(stderr))
		}
	case "never":
	default:
		return fail(usageErrorf("--progress: want auto, always or never, got %q", *progressArg))
	}
	if *scenario == "" && !set["limit"] && !set["period"] && !slices.ContainsFunc(trafficFlags, func(n string) bool { return set[n] }) {
		// Nothing describes a run: show the built-in comparison (a
		// 10-minute simulation that takes milliseconds) rather than fail.
		*scenario = DefaultScenario
		fmt.Fprintf(stderr, "floodgate sim: no --scenario, --limit or --traffic: running the built-in %q scenario (built-ins: --scenario %s; or describe a run with --traffic, --rate, --limit and --period; --help for every flag)\n",
			DefaultScenario, strings.Join(Presets(), "|"))
	}
	if *scenario != "" {
		for _, name := range trafficFlags {
			if set[name] {
				return fail(usageErrorf("--%s describes traffic; with --scenario, edit the scenario's traffic instead", name))
			}
		}
	}
	// Durations given as flags: never negative, and not 0 where 0 is the
	// YAML's "unset" (a default would silently replace what was asked).
	durs := map[string]string{"duration": *duration, "bin": *bin, "period": *period, "on": *on, "off": *off, "cycle": *cycle, "at": *at, "rise": *rise, "hold": *hold, "decay": *decay}
	zeroMeansUnset := map[string]string{
		"duration": "without --duration a replay runs to its last request",
		"bin":      "without --bin it is 1s, or coarser for runs over an hour",
		"period":   "the limit needs a window",
		"on":       "a burst must last",
		"cycle":    "without --cycle the swing takes the whole run",
		"decay":    "without --decay the crowd decays over --rise",
	}
	parsed := map[string]Duration{}
	for _, name := range slices.Sorted(maps.Keys(durs)) {
		if !set[name] {
			continue
		}
		d, err := flagDuration(durs[name])
		switch {
		case err != nil:
			return fail(usageErrorf("--%s %s: %v", name, durs[name], err))
		case d < 0:
			return fail(usageErrorf("--%s: must not be negative, got %v", name, d))
		case d == 0 && zeroMeansUnset[name] != "":
			return fail(usageErrorf("--%s: must be > 0 (%s)", name, zeroMeansUnset[name]))
		}
		parsed[name] = Duration(d)
	}
	for name, v := range map[string]int64{"keys": int64(*keys), "cost": *cost, "instances": int64(*instances)} {
		// 0 is the YAML's "unset"; given as a flag it is a mistake.
		hi := map[string]int64{"keys": maxKeys, "cost": 1 << 30, "instances": maxInstances}[name]
		if set[name] && (v < 1 || v > hi) {
			his := strconv.FormatInt(hi, 10)
			if name == "cost" {
				his = "2^30"
			}
			return fail(usageErrorf("--%s: must be between 1 and %s, got %d", name, his, v))
		}
	}
	var sc *Scenario
	if *scenario != "" {
		var err error
		if sc, err = loadScenario(*scenario); err != nil {
			return fail(err)
		}
	} else {
		src := Source{Kind: *traffic}
		if *replay != "" {
			src = Source{Kind: SourceReplay, File: *replay}
		} else if src.Kind == "" {
			src.Kind = SourcePoisson
		} else if src.Kind == SourceReplay {
			return fail(usageErrorf("--traffic replay: give the log with --replay FILE instead"))
		}
		if err := flagsApply(src.Kind, set); err != nil {
			return fail(err)
		}
		if err := requiredFlags(src.Kind, set); err != nil {
			return fail(err)
		}
		for name, dst := range map[string]*Duration{"on": &src.On, "off": &src.Off, "cycle": &src.Cycle, "at": &src.At, "rise": &src.Rise, "hold": &src.Hold, "decay": &src.Decay} {
			*dst = parsed[name]
		}
		for name, dst := range map[string]*Rate{"rate": &src.Rate, "peak": &src.Peak} {
			if !set[name] {
				continue
			}
			r, err := ParseRate(map[string]string{"rate": *rate, "peak": *peak}[name])
			if err != nil {
				return fail(usageErrorf("--%s: %v", name, err))
			}
			*dst = r
		}
		src.Keys, src.Zipf, src.Cost = *keys, *zipf, *cost
		sc = &Scenario{Name: "flags", Seed: 1, flags: true, Traffic: []Source{src}}
	}
	if set["seed"] {
		s, err := strconv.ParseUint(*seed, 10, 64)
		if err != nil {
			return fail(usageErrorf("--seed: want a non-negative integer, got %q", *seed))
		}
		sc.Seed = s
	}
	for name, dst := range map[string]*Duration{"duration": &sc.Duration, "bin": &sc.Bin, "period": &sc.Period} {
		if set[name] {
			*dst = parsed[name]
		}
	}
	if set["limit"] {
		sc.Limit = *limit
	}
	if set["instances"] {
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
	if err := checkOutputs(*out, *csvPath); err != nil {
		return fail(err)
	}

	start := time.Now()
	res, err := Run(ctx, sc, opts...)
	var interrupted *InterruptedError
	if errors.As(err, &interrupted) {
		// As floodgate bench says it: when, and how far the run got. A
		// part of a run has no table: its figures would pass for the
		// whole run's. A run interrupted in --out's second pass is
		// whole: its table and CSV are written, not the report.
		if interrupted.Replay != "" {
			fmt.Fprintf(stderr, "floodgate sim: interrupted after %.2fs, while reading the replay log %s, before the run; nothing written\n", time.Since(start).Seconds(), interrupted.Replay)
			return exitInterrupted
		}
		if !interrupted.Worst || interrupted.Result == nil {
			fmt.Fprintf(stderr, "floodgate sim: interrupted after %.2fs, at %s of %s simulated (%s); nothing written\n", time.Since(start).Seconds(),
				fmtDur(interrupted.Simulated.Truncate(time.Millisecond)), fmtDur(interrupted.Duration), count(interrupted.Requests, "request"))
			return exitInterrupted
		}
		res, err = interrupted.Result, nil
	}
	if err != nil {
		return fail(err)
	}
	if res.ReplayPast > 0 {
		fmt.Fprintf(stderr, "floodgate sim: warning: %s at or after the end of the run (%v) not simulated; a longer %s, or none (up to the last request), replays them\n",
			count(res.ReplayPast, "replayed request"), sc.Duration.D(), sc.field("duration"))
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
	if interrupted != nil {
		fmt.Fprintf(stderr, "floodgate sim: interrupted after %.2fs, in the second pass that follows each contender's worst key for the --out charts: the run was whole and its results are written, not the report\n", time.Since(start).Seconds())
		return exitInterrupted
	}
	if *out != "" {
		if err := WriteReport(*out, res); err != nil {
			return fail(err)
		}
		fmt.Fprintf(stderr, "report written to %s/index.html\n", strings.TrimRight(*out, "/"))
	}
	fmt.Fprintf(stderr, "simulated %s × %s in %v\n", count(res.Offered.Metrics.Requests, "request"), count(len(res.Contenders)+1, "contender"), time.Since(start).Round(time.Millisecond))
	return 0
}

// checkOutputs checks, before a run that may take long, that what --out
// and --csv name can be written: --out a folder (created with its parents
// if missing) and --csv a file in a folder that exists. It looks only:
// nothing is created before the results are.
func checkOutputs(out, csvPath string) error {
	if out != "" {
		// The path, or its nearest ancestor that exists, must be a folder.
		for p := filepath.Clean(out); ; p = filepath.Dir(p) {
			fi, err := os.Stat(p)
			if err == nil {
				if !fi.IsDir() {
					if p == filepath.Clean(out) {
						return usageErrorf("--out %s: not a folder (it names the report's folder, created if missing)", out)
					}
					return usageErrorf("--out %s: %s is not a folder", out, p)
				}
				break
			}
			// Missing (or under a file: ENOTDIR): look at the parent.
			if filepath.Dir(p) == p {
				break
			}
		}
	}
	if csvPath != "" && csvPath != "-" {
		if fi, err := os.Stat(csvPath); err == nil && fi.IsDir() {
			return usageErrorf("--csv %s: a folder, want a file name", csvPath)
		}
		dir := filepath.Dir(csvPath)
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return usageErrorf("--csv %s: the folder %s does not exist (create it first)", csvPath, dir)
		}
	}
	return nil
}

// flagsApply rejects the traffic flags set that the traffic kind would
// ignore.
func flagsApply(kind string, set map[string]bool) error {
	if kind == SourceReplay {
		for _, name := range []string{"traffic", "rate", "peak", "keys", "zipf", "cost", "on", "off", "cycle", "at", "rise", "hold", "decay"} {
			if set[name] {
				return usageErrorf("--%s does not apply to --replay: the log gives each request's time, key and cost", name)
			}
		}
		return nil
	}
	if !slices.Contains(sourceKinds, kind) {
		return usageErrorf("--traffic: unknown %q (want one of %s; or --replay FILE)", kind, strings.Join(sourceKinds[:len(sourceKinds)-1], ", "))
	}
	only := map[string][]string{
		"on": {SourceBursts}, "off": {SourceBursts},
		"peak":  {SourceDiurnal, SourceRamp, SourceFlash},
		"cycle": {SourceDiurnal},
		"at":    {SourceFlash}, "rise": {SourceFlash}, "hold": {SourceFlash}, "decay": {SourceFlash},
	}
	for _, name := range []string{"peak", "on", "off", "cycle", "at", "rise", "hold", "decay"} {
		if set[name] && !slices.Contains(only[name], kind) {
			return usageErrorf("--%s applies to --traffic %s only, not %s", name, strings.Join(only[name], ", "), kind)
		}
	}
	return nil
}

// requiredFlags names, in one error, every flag a run without --scenario
// needs and was not given: --limit, --period, --duration (unless the
// requests come from --replay) and what the traffic kind needs.
func requiredFlags(kind string, set map[string]bool) error {
	var missing []string
	need := func(name, why string) {
		if !set[name] {
			missing = append(missing, fmt.Sprintf("--%s is required (%s)", name, why))
		}
	}
	need("limit", "units per --period per key, e.g. --limit 100")
	need("period", "the window of --limit, e.g. --period 1m")
	if kind != SourceReplay {
		need("duration", "how much time to simulate, e.g. --duration 10m")
	}
	traffic := "--traffic " + kind
	if !set["traffic"] {
		traffic = "the default traffic is " + kind
	}
	switch kind {
	case SourceSteady, SourcePoisson:
		need("rate", traffic+"; e.g. --rate 100 (per second) or --rate 6000/m")
	case SourceBursts:
		need("rate", traffic+": the rate during a burst, e.g. --rate 100")
		need("on", traffic+": the length of a burst, e.g. --on 5s (with --off 25s)")
	case SourceDiurnal:
		need("peak", traffic+": the rate swings between --rate (default 0) and --peak, e.g. --rate 50 --peak 150")
	case SourceRamp:
		need("peak", traffic+": the rate moves from --rate (default 0) to --peak, e.g. --rate 10 --peak 200")
	case SourceFlash:
		need("peak", traffic+": the crowd climbs from --rate (default 0) to --peak, e.g. --rate 50 --peak 500")
		if !set["rise"] && !set["hold"] && !set["decay"] {
			missing = append(missing, fmt.Sprintf("--rise, --hold or --decay is required (%s: without them the crowd would last no time), e.g. --rise 2s --hold 5s", traffic))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	msg := strings.Join(missing, "; ")
	if !set["limit"] || !set["period"] {
		msg += fmt.Sprintf("; or run a built-in scenario: --scenario %s", strings.Join(Presets(), "|"))
	}
	return usageErrorf("%s", msg)
}

// flagDuration reads a duration flag: "90s", "1m30s", "500ms", or 0. A
// bare number other than 0 is refused with what to write, as serve's
// duration flags and the configuration's durations refuse it: a scenario's
// YAML reads one as seconds, but on the command line "--period 60" reads
// as easily as 60 ms or 60 minutes.
func flagDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if f == 0 || math.IsNaN(f) || math.IsInf(f, 0) {
			return parseDuration(s) // 0, or out of range
		}
		want := s + "s"
		if math.Abs(f) <= 1e9 {
			if alt := fmtDur(time.Duration(f * float64(time.Second))); alt != want && alt != "0s" {
				want += ", " + alt
			}
		}
		return 0, fmt.Errorf("a duration needs a unit: %s", want)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("bad duration %q (want e.g. 90s, 1m30s or 500ms)", s)
	}
	return d, nil
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
	d, err := flagDuration(at)
	if err != nil {
		return fmt.Errorf("AT %s: %v", at, err)
	}
	n, err := strconv.Atoi(k)
	if err != nil {
		return fmt.Errorf("instances %q: want an integer", k)
	}
	*s = append(*s, Event{At: Duration(d), Instances: n, flag: v, flagN: len(*s) + 1})
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
	ct.flag, ct.flagN = v, len(*c)+1
	*c = append(*c, ct)
	return nil
}

// contenderDurations are the YAML names of Contender's Duration settings.
var contenderDurations = func() map[string]bool {
	m := map[string]bool{}
	t := reflect.TypeFor[Contender]()
	for i := range t.NumField() {
		if f := t.Field(i); f.Type == reflect.TypeFor[Duration]() {
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			m[name] = true
		}
	}
	return m
}()

// ParseContender reads a contender from the flag form "KIND key=value ...":
// KIND is an algorithm (a single limiter) or a strategy (over sliding_log
// unless algorithm= says otherwise); keys are the YAML field names. Unlike
// the YAML, which reads a bare number as seconds, a duration setting
// (rtt, lag, lease_ttl, hold, warmup_period, max_wait) needs a unit, as
// the duration flags do: rtt=2ms, not rtt=0.002.
func ParseContender(s string) (Contender, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return Contender{}, fmt.Errorf("%w: empty contender", ErrScenario)
	}
	m := &yaml.Node{Kind: yaml.MappingNode}
	add := func(k, v string) {
		m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: k}, &yaml.Node{Kind: yaml.ScalarNode, Value: v})
	}
	if k, _, ok := strings.Cut(fields[0], "="); ok && k != "" {
		// A setting where the algorithm or strategy belongs: say where it
		// goes, not that the next word is no key=value or that "burst=5"
		// is no algorithm.
		if kind := slices.IndexFunc(fields, func(f string) bool { return !strings.Contains(f, "=") }); kind > 0 {
			moved := slices.Concat(fields[kind:kind+1], fields[:kind], fields[kind+1:])
			return Contender{}, fmt.Errorf("%w: contender %q: the algorithm or strategy comes first: %q", ErrScenario, s, strings.Join(moved, " "))
		}
		return Contender{}, fmt.Errorf("%w: contender %q: starts with the setting %q; the algorithm (%s) or strategy (%s) comes first: \"KIND %s\"", ErrScenario, s, k, kindNames(), strings.Join(strategies, ", "), strings.Join(fields, " "))
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
		if contenderDurations[k] {
			// A setting given on the command line needs a unit, as the
			// other duration flags do (lag=500 would be 500 seconds).
			if _, err := flagDuration(v); err != nil {
				return Contender{}, fmt.Errorf("%w: contender %q: %s=%s: %v", ErrScenario, s, k, v, err)
			}
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
	for k := range c.written {
		c.written[k] = 0
	}
	return c, nil
}
