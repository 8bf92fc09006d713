package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A named pipe or a device given as the configuration, a TLS file or a
// token file stops the start at once, saying what it is: the open of a
// pipe waited for a writer, and SIGTERM could not stop serve meanwhile.
func TestServeRefusesFilesThatAreNotFiles(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "rules.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--config", fifo}, fifo + ": cannot read: not a regular file: it is a named pipe"},
		{[]string{"--tls-cert", "/dev/zero", "--tls-key", fifo}, "--tls-cert /dev/zero: not a regular file: it is a device"},
		{[]string{"--admin-token-file", fifo}, "--admin-token-file " + fifo + ": not a regular file: it is a named pipe"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var out, errb bytes.Buffer
		start := time.Now()
		code := run(ctx, append([]string{"serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, c.args...), &out, &errb)
		cancel()
		if code == 0 || !strings.Contains(errb.String(), c.want) || time.Since(start) > 5*time.Second {
			t.Errorf("%q: exit %d after %v, stderr %s; want a refusal at once saying %q", c.args, code, time.Since(start), errb.String(), c.want)
		}
	}
}
