package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate/loadgen"
)

func init() {
	commands["bench"] = command{"load-test a running server (gRPC, /json or /v1)", runBench}
}

// descriptorFlags collects repeated -D flags as written; checkBench parses
// them, so that a bad one is reported with the other flags' problems.
type descriptorFlags []string

func (d *descriptorFlags) String() string { return "" }

func (d *descriptorFlags) Set(s string) error {
	*d = append(*d, s)
	return nil
}

// runBench is `floodgate bench`: flags to loadgen.Config, the report on
// stdout, the progress bar on stderr.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c loadgen.Config
	var descs descriptorFlags
	var quiet bool
	fs.StringVar(&c.Protocol, "p", loadgen.GRPC, "protocol: grpc (ShouldRateLimit), json (POST /json) or v1 (POST /v1/decide)")
	fs.StringVar(&c.Addr, "addr", "", "server address (default 127.0.0.1:8081 for grpc, 127.0.0.1:8080 for json and v1)")
	fs.StringVar(&c.Domain, "domain", "api", "rate limit domain")
	fs.Var(&descs, "D", "a descriptor as key=value,key2=value2; repeat for several; {i} in a value is the key index (default generic_key=default)")
	fs.IntVar(&c.Keys, "keys", 1, "number of distinct values {i} takes, at least 1")
	fs.IntVar(&c.Hits, "hits", 1, "cost of each request, at least 1")
	fs.Int64Var(&c.Requests, "n", 0, "stop after this many requests (0: no count bound)")
	fs.DurationVar(&c.Duration, "d", 10*time.Second, "stop after this long (0: no time bound; -n or -d must be set)")
	fs.IntVar(&c.Concurrency, "c", 16, "concurrent callers, 1 to 10000")
	fs.IntVar(&c.Connections, "conns", 0, "connections the callers share, at most -c (0: min(c, 4))")
	fs.DurationVar(&c.Timeout, "timeout", 5*time.Second, "timeout of each request, more than 0")
	fs.BoolVar(&quiet, "q", false, "no progress bar")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: floodgate bench [flags]\n\nSends rate limit requests to a running floodgate server and reports admitted and rejected\ncounts, errors, decisions/s and a latency histogram. Example:\n\n  floodgate bench -p grpc -n 100000 -c 64 -domain api -D 'user={i}' -keys 10000\n\nflags:")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args, 0, stdout, stderr); !ok {
		return code
	}
	c.Protocol = strings.ToLower(c.Protocol)
	var err error
	if c.Descriptors, err = checkBench(c, descs); err != nil {
		fmt.Fprintln(stderr, "floodgate bench:", err)
		return 2
	}
	if c.Addr == "" {
		c.Addr = "127.0.0.1:8080"
		if c.Protocol == loadgen.GRPC {
			c.Addr = "127.0.0.1:8081"
		}
	}
	if !quiet {
		c.Progress = stderr
	}
	res, err := loadgen.Run(ctx, c)
	if err != nil {
		fmt.Fprintln(stderr, "floodgate bench:", err)
		return 2
	}
	res.Print(stdout)
	if res.Errors > 0 && res.Admitted+res.Rejected == 0 {
		return 1
	}
	return 0
}

// checkBench returns the descriptors of the -D flags, or every flag out of
// range, each as "-flag value: what it must be", one a line. Loadgen takes
// a zero as its default; bench's flags have their defaults already, so a
// zero or a negative given is a mistake, except where the flag's help says
// what 0 means (-n, -d, -conns).
func checkBench(c loadgen.Config, descs []string) ([][]loadgen.Entry, error) {
	var errs []error
	bad := func(failed bool, flag string, value any, want string) {
		if failed {
			errs = append(errs, fmt.Errorf("%s %v: %s", flag, value, want))
		}
	}
	switch c.Protocol {
	case loadgen.GRPC, loadgen.JSON, loadgen.V1:
	default:
		errs = append(errs, fmt.Errorf("-p %s: want grpc, json or v1", c.Protocol))
	}
	bad(c.Domain == "", "-domain", `""`, "must not be empty")
	var entries [][]loadgen.Entry
	for _, d := range descs {
		e, err := loadgen.ParseDescriptor(d)
		if err != nil {
			errs = append(errs, fmt.Errorf("-D %s: %w", shown(d), err))
			continue
		}
		entries = append(entries, e)
	}
	bad(c.Keys < 1, "-keys", c.Keys, "must be >= 1")
	bad(c.Hits < 1 || c.Hits > math.MaxUint32, "-hits", c.Hits, fmt.Sprintf("must be 1 to %d", uint32(math.MaxUint32)))
	bad(c.Requests < 0, "-n", c.Requests, "must be >= 0 (0: no count bound)")
	bad(c.Duration < 0, "-d", c.Duration, "must be >= 0 (0: no time bound)")
	if c.Requests == 0 && c.Duration == 0 {
		errs = append(errs, errors.New("-n 0 -d 0: set -n, -d or both, a run must be bounded"))
	}
	bad(c.Concurrency < 1 || c.Concurrency > loadgen.MaxConcurrency, "-c", c.Concurrency, fmt.Sprintf("must be 1 to %d", loadgen.MaxConcurrency))
	upTo := "-c"
	if c.Concurrency >= 1 {
		upTo = fmt.Sprintf("%d (-c)", c.Concurrency)
	}
	bad(c.Connections < 0 || c.Concurrency >= 1 && c.Connections > c.Concurrency, "-conns", c.Connections,
		"must be 0 (default: min(c, 4)) or 1 to "+upTo)
	bad(c.Timeout <= 0, "-timeout", c.Timeout, "must be > 0")
	return entries, errors.Join(errs...)
}

// shown is a flag value as an error shows it: quoted when it is empty or
// holds spaces, which would be lost otherwise.
func shown(v string) string {
	if v == "" || strings.ContainsAny(v, " \t") {
		return strconv.Quote(v)
	}
	return v
}
