// Command floodgate is the Floodgate rate limiter's server and tools:
//
//	floodgate serve      run the rate limit server (gRPC, HTTP, admin)
//	floodgate validate   check a configuration file or directory
//	floodgate sim        simulate algorithms and distributed strategies
//	floodgate bench      load-test a running server
//	floodgate version    print version and build information
//
// main only parses the command line and hands over to the packages that do
// the work.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/floodgate/floodgate/internal/names"
)

// command is one subcommand: it gets its arguments (without its name) and
// returns the process exit code.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

var commands = map[string]command{
	"version": {"print version and build information", runVersion},
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first SIGTERM/SIGINT asks for a graceful stop (serve: the
	// shutdown delay, then the drain); once it has, the signals get their
	// default action back, so a second one stops the process at once, as
	// a second Ctrl-C is expected to.
	context.AfterFunc(ctx, stop)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches to the subcommand. Help asked for (-h, --help, help,
// help COMMAND) goes to stdout with exit 0, so that it can be paged; usage
// shown because of a mistake goes to stderr with exit 2.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if args[0] != "help" || len(args) == 1 || args[1] == "help" {
			usage(stdout)
			return 0
		}
		if _, ok := commands[args[1]]; !ok {
			unknownCommand(args[1], stderr)
			return 2
		}
		return commands[args[1]].run(ctx, []string{"-h"}, stdout, stderr)
	case "-version", "--version":
		return runVersion(ctx, args[1:], stdout, stderr)
	}
	cmd, ok := commands[args[0]]
	if !ok {
		unknownCommand(args[0], stderr)
		return 2
	}
	return cmd.run(ctx, args[1:], stdout, stderr)
}

// badFlagValue reports whether err is the flag package's error for a flag
// it knows given a value its Set refused ("invalid value …", "invalid
// boolean value …") or no value ("flag needs an argument: -x"); the
// error's own text, not a Set's, which it only quotes after the flag.
func badFlagValue(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "invalid ") || strings.HasPrefix(msg, "flag needs an argument: ")
}

// badValue is the flag package's error for a value a flag's Set refused.
var badValue = regexp.MustCompile(`^invalid (?:boolean )?value ".*" for (?:flag )?-([^:]+): `)

// valueHint returns "; want a duration such as 500ms…" (what wantForm
// says, as for a FLOODGATE_* variable) when err is the flag package's
// error for a value it could not parse, "" otherwise.
func valueHint(fs *flag.FlagSet, err error) string {
	m := badValue.FindStringSubmatch(err.Error())
	if m == nil {
		return ""
	}
	fl := fs.Lookup(m[1])
	if fl == nil {
		return ""
	}
	if want := wantForm(fl, err); want != err.Error() {
		return "; " + want
	}
	return ""
}

func unknownCommand(name string, stderr io.Writer) {
	known := make([]string, 0, len(commands))
	for n := range commands {
		known = append(known, n)
	}
	hint := ""
	if s := names.Closest(name, known); s != "" {
		hint = fmt.Sprintf(" (did you mean %q?)", s)
	}
	fmt.Fprintf(stderr, "floodgate: unknown command %q%s\n\n", name, hint)
	usage(stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: floodgate <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "  %-9s %s\n", name, commands[name].summary)
	}
	fmt.Fprintln(w, "\nRun 'floodgate <command> -h' for the command's flags.")
}

// boolValueHint explains an argument the flag package stopped at when it
// is a boolean's value written apart from its flag (--shadow false, as
// Kubernetes args lists often put it): a boolean flag takes no separate
// value, so "false" ended the flags, and --shadow alone meant true. It
// returns "" for any other argument. parsed is how many of args the flag
// package took.
func boolValueHint(fs *flag.FlagSet, args []string, parsed int) string {
	if parsed <= 0 || parsed >= len(args) {
		return ""
	}
	val, prev := args[parsed], args[parsed-1]
	if _, err := strconv.ParseBool(val); err != nil || !strings.HasPrefix(prev, "-") || strings.Contains(prev, "=") {
		return ""
	}
	f := fs.Lookup(strings.TrimLeft(prev, "-"))
	if f == nil {
		return ""
	}
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
		return ""
	}
	return fmt.Sprintf(" after the boolean flag %s, which takes no separate value (alone it means true): write %s=%s", prev, prev, val)
}

// extraArgHint follows "unexpected argument" for a command that takes
// one argument where several were given: `floodgate validate
// rules/*.yaml`, the shell's list of a directory's files, checks none.
var extraArgHint = map[string]string{
	"validate": ": validate takes one PATH; to check several files, give their directory: its .yaml files are checked together, as serve --config loads them",
}

// parseFlags parses args into fs and checks that exactly positional
// arguments follow the flags. fs.Usage must write to fs.Output(): after
// -h it writes to stdout, after a mistake to stderr. ok false means the
// command must exit with code: 0 after -h, 2 after a bad flag or a wrong
// number of arguments (the problem, and the usage for a wrong count or
// with -h among args; for a bad flag, a line saying to run -h). An unknown
// flag close to a defined one gets a "did you mean".
func parseFlags(fs *flag.FlagSet, args []string, positional int, stdout, stderr io.Writer) (code int, ok bool) {
	// The flag package prints its own message and the usage, both to one
	// output: silence it and print them where they belong.
	usage := fs.Usage
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = usage
	fs.SetOutput(stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		fs.SetOutput(stderr)
		return 0, false
	case err != nil && badFlagValue(err) && !helpAsked(args):
		// A flag that exists, given a bad value or none: the usage
		// (serve's is 80 lines) would scroll the one line that matters
		// away. With -h among the arguments (the flag package stopped
		// before it), the usage that was asked for follows the error.
		fmt.Fprintf(stderr, "floodgate %s: %v%s (floodgate %s -h lists the flags)\n", fs.Name(), err, valueHint(fs, err), fs.Name())
		return 2, false
	case err != nil && !helpAsked(args):
		// An unknown flag: the error and where the flags are listed, not
		// the usage (serve's is 100 lines) that would scroll the "did you
		// mean" away.
		fmt.Fprintf(stderr, "floodgate %s: %v%s%s\nRun 'floodgate %[1]s -h' for the flags.\n", fs.Name(), err, names.FlagHint(fs, err), valueHint(fs, err))
		return 2, false
	case err != nil:
		fmt.Fprintf(stderr, "floodgate %s: %v%s%s\n", fs.Name(), err, names.FlagHint(fs, err), valueHint(fs, err))
		fs.Usage()
		return 2, false
	}
	// After "--" every argument is meant as one, even one that starts
	// with '-'.
	parsed := len(args) - fs.NArg()
	if positional == 0 && fs.NArg() > 0 {
		fmt.Fprintf(stderr, "floodgate %s: unexpected argument %q%s\n", fs.Name(), fs.Arg(0), boolValueHint(fs, args, parsed))
		return 2, false
	}
	dashes := parsed > 0 && args[parsed-1] == "--"
	switch extra := fs.Arg(positional); {
	case fs.NArg() < positional:
		fmt.Fprintf(stderr, "floodgate %s: missing argument\n", fs.Name())
	case fs.NArg() > positional && !dashes && strings.HasPrefix(extra, "-") && extra != "-" && extra != "--":
		// The flag package stops at the first argument.
		fmt.Fprintf(stderr, "floodgate %s: %q after %q: flags go before the arguments\n", fs.Name(), extra, fs.Arg(positional-1))
	case fs.NArg() > positional:
		fmt.Fprintf(stderr, "floodgate %s: unexpected argument %q%s\n", fs.Name(), fs.Arg(positional), extraArgHint[fs.Name()])
	}
	if fs.NArg() != positional {
		fs.Usage()
		return 2, false
	}
	return 0, true
}
