package main

import (
	"os"
	"testing"

	"github.com/floodgate/floodgate/internal/testbinary"
)

func TestMain(m *testing.M) { os.Exit(testbinary.Main(m)) }

// startBinary runs the floodgate binary's `floodgate serve` with args and
// env, as testbinary.Serve does (the listeners on 127.0.0.1:0, SIGTERM and
// exit 0 within 15 s at the test's end), once it says it serves. It skips
// the test under -short.
func startBinary(t *testing.T, env []string, args ...string) *testbinary.Process {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the floodgate binary")
	}
	return testbinary.Serve(t, env, args...)
}
