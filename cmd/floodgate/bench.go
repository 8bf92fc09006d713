package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/floodgate/floodgate/loadgen"
)

func init() {
	commands["bench"] = command{"load-test a running server (gRPC, /json or /v1)", runBench}
}

// descriptorFlags collects repeated -D flags.
type descriptorFlags [][]loadgen.Entry

func (d *descriptorFlags) String() string { return "" }

func (d *descriptorFlags) Set(s string) error {
	e, err := loadgen.ParseDescriptor(s)
	if err != nil {
		return err
	}
	*d = append(*d, e)
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
	fs.IntVar(&c.Keys, "keys", 1, "number of distinct values {i} takes")
	fs.IntVar(&c.Hits, "hits", 1, "cost of each request")
	fs.Int64Var(&c.Requests, "n", 0, "stop after this many requests (0: no count bound)")
	fs.DurationVar(&c.Duration, "d", 10*time.Second, "stop after this long (0: no time bound; -n or -d must be set)")
	fs.IntVar(&c.Concurrency, "c", 16, "concurrent callers")
	fs.IntVar(&c.Connections, "conns", 0, "connections the callers share (default min(c, 4))")
	fs.DurationVar(&c.Timeout, "timeout", 5*time.Second, "timeout of each request")
	fs.BoolVar(&quiet, "q", false, "no progress bar")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: floodgate bench [flags]\n\nSends rate limit requests to a running floodgate server and reports admitted and rejected\ncounts, errors, decisions/s and a latency histogram. Example:\n\n  floodgate bench -p grpc -n 100000 -c 64 -domain api -D 'user={i}' -keys 10000\n\nflags:")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args, 0, stdout, stderr); !ok {
		return code
	}
	c.Protocol = strings.ToLower(c.Protocol)
	if err := checkBench(c); err != nil {
		fmt.Fprintln(stderr, "floodgate bench:", err)
		return 2
	}
	if c.Addr == "" {
		c.Addr = "127.0.0.1:8080"
		if c.Protocol == loadgen.GRPC {
			c.Addr = "127.0.0.1:8081"
		}
	}
	c.Descriptors = descs
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

// checkBench returns every flag of c out of range, each as "-flag value:
// what it must be", one a line (loadgen's own checks know no flag names).
func checkBench(c loadgen.Config) error {
	var errs []error
	switch c.Protocol {
	case loadgen.GRPC, loadgen.JSON, loadgen.V1:
	default:
		errs = append(errs, fmt.Errorf("-p %s: want grpc, json or v1", c.Protocol))
	}
	if c.Requests < 0 {
		errs = append(errs, fmt.Errorf("-n %d: must be >= 0 (0: no count bound)", c.Requests))
	}
	if c.Duration < 0 {
		errs = append(errs, fmt.Errorf("-d %v: must be >= 0 (0: no time bound)", c.Duration))
	}
	if c.Requests == 0 && c.Duration == 0 {
		errs = append(errs, errors.New("-n 0 -d 0: set -n, -d or both, a run must be bounded"))
	}
	if c.Concurrency > 10000 {
		errs = append(errs, fmt.Errorf("-c %d: must be at most 10000", c.Concurrency))
	}
	return errors.Join(errs...)
}
