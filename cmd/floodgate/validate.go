package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/floodgate/floodgate/policy"
)

func init() {
	commands["validate"] = command{"check a configuration file or directory", runValidate}
}

// runValidate is `floodgate validate [-v] PATH`: every problem as
// file:line: message and exit 1, or exit 0 when the configuration is valid
// (-v also prints the compiled rules).
func runValidate(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	verbose := fs.Bool("v", false, "print the compiled rules of a valid configuration")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: floodgate validate [-v] PATH\n\nPATH is a YAML file or a directory of them. Prints every problem as file:line: message and exits 1; exits 0 when valid.")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args, 1, stdout, stderr); !ok {
		return code
	}
	cfg, err := load(fs.Arg(0))
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if *verbose {
		fmt.Fprint(stdout, cfg.Dump())
	}
	fmt.Fprintf(stdout, "%s: valid (%s, %s)\n", fs.Arg(0), count(len(cfg.Domains()), "domain"), count(len(cfg.Rules()), "rule"))
	return 0
}

// load is policy.Load with every problem of every file. Load does not check
// the rules of a domain declared a second time (it reports the duplicate
// and drops the domain), so each file a problem names is loaded again on
// its own, where its domains are not duplicates, and the problems found
// either way are merged. A file's domains depend on that file alone, so
// what it reports on its own is a problem of the whole configuration too.
func load(path string) (*policy.Config, error) {
	cfg, err := policy.Load(path)
	probs, ok := errors.AsType[policy.Problems](err)
	if !ok {
		return cfg, err
	}
	all := slices.Clone(probs)
	seen := map[policy.Problem]bool{}
	for _, p := range probs {
		seen[p] = true
	}
	reloaded := map[string]bool{path: true}
	for _, p := range probs {
		if reloaded[p.File] {
			continue
		}
		reloaded[p.File] = true
		_, err := policy.Load(p.File)
		more, _ := errors.AsType[policy.Problems](err)
		for _, q := range more {
			if !seen[q] {
				seen[q] = true
				all = append(all, q)
			}
		}
	}
	slices.SortStableFunc(all, func(a, b policy.Problem) int {
		return cmp.Or(strings.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line))
	})
	return nil, all
}

// count is "1 rule", "0 rules", "2 rules": n and the noun, plural unless n is 1.
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
