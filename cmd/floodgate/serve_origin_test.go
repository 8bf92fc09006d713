package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A path with an '@' (a systemd template instance's directory,
// floodgate@prod) was named as if it held URL credentials: errors said
// "--config xxxxx@prod/api.yaml" and "--admin-token-file
// xxxxx@prod/token", naming no file the operator has. Only the URL flags
// (--store, --upstream) hide what precedes an '@'.
func TestServeErrorsNamePathsWithAt(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "floodgate@prod")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "api.yaml")
	if err := os.WriteFile(cfg, []byte("domain: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	token := filepath.Join(dir, "token")
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--config", cfg}, nil, "floodgate serve: --config " + cfg + ":\n"},
		{[]string{"--config", good, "--admin-token-file", token}, nil, "floodgate serve: --admin-token-file " + token + ": no such file or directory"},
		{[]string{"--config", good}, map[string]string{"FLOODGATE_ADMIN_TOKEN_FILE": token},
			"floodgate serve: FLOODGATE_ADMIN_TOKEN_FILE=\"" + token + "\": no such file or directory"},
		{[]string{"--config", good, "--tls-cert", filepath.Join(dir, "tls.crt")}, nil,
			"floodgate serve: --tls-cert " + filepath.Join(dir, "tls.crt") + ": needs --tls-key too"},
	} {
		for k, v := range c.env {
			t.Setenv(k, v)
		}
		var out, errb strings.Builder
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		code := run(ctx, append([]string{"serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, c.args...), &out, &errb)
		cancel()
		if code != 1 || !strings.HasPrefix(errb.String(), c.want) {
			t.Errorf("%q %v: exit %d, stderr %q; want exit 1 and a message starting %q", c.args, c.env, code, errb.String(), c.want)
		}
		for k := range c.env {
			t.Setenv(k, "")
		}
	}
}
