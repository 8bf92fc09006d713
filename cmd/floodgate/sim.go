package main

import (
	"context"
	"io"

	"github.com/floodgate/floodgate/sim"
)

func init() {
	commands["sim"] = command{"simulate algorithms and distributed strategies against a perfect window", runSim}
}

// runSim is `floodgate sim`. Package sim parses its own flags and prints
// its usage to the stderr it is given, so help asked for is sent there as
// stdout.
func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if helpAsked(args) {
		return sim.MainContext(ctx, []string{"-h"}, stdout, stdout)
	}
	return sim.MainContext(ctx, args, stdout, stderr)
}

// helpAsked reports whether args ask for help: -h, -help, --h or --help
// before any "--".
func helpAsked(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--h", "--help":
			return true
		}
	}
	return false
}
