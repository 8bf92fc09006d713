package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"

	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/policy"
)

func init() {
	commands["validate"] = command{"check a configuration file or directory", runValidate}
}

// runValidate is `floodgate validate [-v] [--preserve-host] PATH`: every problem as
// file:line: message and exit 1, or exit 0 when the configuration is valid
// (-v also prints the compiled rules). Gateway routes are built as serve
// builds them (no user function, no fallbacks), so what validate passes
// serve runs; warnings ("file:line: warning: ...", on stderr after the
// problems: the configuration's, then the routes') do not fail, and are
// printed when there are problems too.
func runValidate(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	verbose := fs.Bool("v", false, "print the compiled rules of a valid configuration")
	preserveHost := fs.Bool("preserve-host", false, "check the gateway routes as serve --upstream --preserve-host builds them (routes with a host: need it)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: floodgate validate [-v] [--preserve-host] PATH\n\nPATH is a YAML file or a directory of them. Prints every problem as file:line: message and exits 1; exits 0 when valid.\nGateway routes are built as floodgate serve --upstream builds them. Warnings (file:line: warning: message) do not fail:\nfields ignored where they are written (as envoyproxy/ratelimit ignores them), fields set twice, several documents in a file,\na directory without configuration files, a strategy on a shadow descriptor, a ceil its parent caps, a max_wait shorter\nthan a fixed window or a bucket's refill of one unit, routes whose descriptors no rule limits.")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args, 1, stdout, stderr); !ok {
		return code
	}
	cfg, warnings, err := policy.LoadWithWarnings(fs.Arg(0))
	if err == nil {
		// As serve builds the routes: gatewayHandler registers no user
		// function and no fallback.
		var routeWarnings policy.Problems
		routeWarnings, err = gateway.Check(cfg, gateway.WithPreserveHost(*preserveHost))
		warnings = slices.Concat(warnings, routeWarnings)
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
	}
	for _, w := range warnings {
		w.Message = "warning: " + w.Message
		fmt.Fprintln(stderr, w)
	}
	if err != nil {
		return 1
	}
	if *verbose {
		fmt.Fprint(stdout, cfg.Dump())
	}
	fmt.Fprintf(stdout, "%s: valid (%s, %s)\n", fs.Arg(0), count(len(cfg.Domains()), "domain"), count(len(cfg.Rules()), "rule"))
	return 0
}

// count is "1 rule", "0 rules", "2 rules": n and the noun, plural unless n is 1.
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
