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
	"sort"
	"syscall"
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
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "floodgate: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	return cmd.run(ctx, args[1:], stdout, stderr)
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

// parseFlags parses args into fs and checks that exactly positional
// arguments follow the flags. ok false means the command must exit with
// code: 0 after -h (the usage is printed), 2 after a bad flag or a wrong
// number of arguments (the problem and, for a count, the usage printed).
func parseFlags(fs *flag.FlagSet, args []string, positional int, stderr io.Writer) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	if positional == 0 && fs.NArg() > 0 {
		fmt.Fprintf(stderr, "floodgate %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return 2, false
	}
	if fs.NArg() != positional {
		fs.Usage()
		return 2, false
	}
	return 0, true
}
