package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// version is set at build time: -ldflags "-X main.version=v1.2.3". Left at
// "dev", the version comes from the build information (see versionString).
var version = "dev"

// runVersion is `floodgate version` (also `floodgate --version`).
func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: floodgate version\n\nPrints the version, the Go version and platform, and the module and VCS build information.")
	}
	if code, ok := parseFlags(fs, args, 0, stdout, stderr); !ok {
		return code
	}
	bi, _ := debug.ReadBuildInfo() // nil when the binary has none
	fmt.Fprintf(stdout, "floodgate %s\n", versionString(version, bi))
	fmt.Fprintf(stdout, "go: %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if bi != nil {
		fmt.Fprintf(stdout, "module: %s %s\n", bi.Main.Path, bi.Main.Version)
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision", "vcs.time", "vcs.modified":
				fmt.Fprintf(stdout, "%s: %s\n", s.Key, s.Value)
			}
		}
	}
	return 0
}

// versionString is the version to print: v when -ldflags set it;
// otherwise the module version of bi (nil: none) unless it is "(devel)",
// else "dev", followed by the VCS revision and "modified" when bi has them
// and the module version does not already carry them, e.g.
// "dev (a1b2c3d, modified)".
func versionString(v string, bi *debug.BuildInfo) string {
	if v != "dev" || bi == nil {
		return v
	}
	if mv := bi.Main.Version; mv != "" && mv != "(devel)" {
		v = mv
	}
	var rev string
	var modified bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if len(rev) > 7 {
		rev = rev[:7]
	}
	// A pseudo-version (v0.0.0-20260102150405-a1b2c3d4e5f6+dirty) names
	// the revision already.
	if rev == "" || strings.Contains(v, rev) {
		return v
	}
	if modified {
		return v + " (" + rev + ", modified)"
	}
	return v + " (" + rev + ")"
}
