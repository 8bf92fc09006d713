package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// An --upstream that is the gateway's own --http address proxied each
// request to itself, every hop a new request, until the client gave up:
// 300 MB and a third of a core for one curl -m 5 to a path of
// examples/gateway. serve now refuses it before listening.
func TestServeUpstreamIsSelf(t *testing.T) {
	for _, c := range []struct {
		upstream, listen string
		want             bool
	}{
		{"http://127.0.0.1:8080", "127.0.0.1:8080", true},
		{"http://127.0.0.1:8080/base", "127.0.0.1:8080", true},
		{"h2c://127.0.0.1:8080", "127.0.0.1:8080", true},
		{"https://127.0.0.1:8080", "127.0.0.1:8080", true},
		{"http://localhost:8080", "127.0.0.1:8080", true},
		{"http://LOCALHOST:8080", "[::1]:8080", true},
		{"http://[::1]:8080", "[::1]:8080", true},
		{"http://[::ffff:127.0.0.1]:8080", "127.0.0.1:8080", true},
		{"http://127.0.0.1:8080", ":8080", true},
		{"http://127.0.0.2:8080", "0.0.0.0:8080", true},
		{"http://0.0.0.0:8080", "[::]:8080", true},
		{"http://localhost", "0.0.0.0:80", true},
		{"https://localhost", ":443", true},
		{"http://gateway.internal:8080", "gateway.internal:8080", true},
		{"http://127.0.0.1:8080", "localhost:8080", true},
		{"http://[::1]:8080", "LocalHost:8080", true},
		// Not this server: another port, another address, a name not resolved.
		{"http://127.0.0.1:8081", "127.0.0.1:8080", false},
		{"http://127.0.0.2:8080", "127.0.0.1:8080", false},
		{"http://localhost:8080", "127.0.0.2:8080", false},
		{"http://10.0.0.5:8080", "127.0.0.1:8080", false},
		{"http://192.0.2.1:8080", ":8080", false},
		{"http://backend.internal:8080", ":8080", false},
		{"http://127.0.0.2:8080", "localhost:8080", false},
		{"http://backend.internal:8080", "gateway.internal:8080", false},
		{"http://127.0.0.1", "127.0.0.1:8080", false},
		{"https://127.0.0.1", "127.0.0.1:80", false},
		{"http://127.0.0.1:0", "127.0.0.1:0", false},
		{"127.0.0.1:8080", "127.0.0.1:8080", false}, // not a URL: gateway.New says what is wrong
	} {
		if got := upstreamIsSelf(c.upstream, c.listen); got != c.want {
			t.Errorf("upstreamIsSelf(%q, %q) = %v, want %v", c.upstream, c.listen, got, c.want)
		}
	}
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"serve", "--http", "127.0.0.1:28999", "--upstream", "http://127.0.0.1:28999"}, nil,
			"floodgate serve: --upstream http://127.0.0.1:28999: is this server's own --http 127.0.0.1:28999: every request would be proxied back to the gateway, again and again, until the client gave up; give the address of the service behind it\n"},
		{[]string{"serve", "--http", "127.0.0.1:28998"}, map[string]string{"FLOODGATE_UPSTREAM": "http://localhost:28998"},
			"floodgate serve: FLOODGATE_UPSTREAM=\"http://localhost:28998\": is this server's own --http 127.0.0.1:28998: every request would be proxied back to the gateway, again and again, until the client gave up; give the address of the service behind it\n"},
	} {
		for k, v := range c.env {
			t.Setenv(k, v)
		}
		var out, errb strings.Builder
		// Bounded: without the check serve would run until cancelled.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		code := run(ctx, append(c.args, "--config", "../../examples/gateway", "--grpc", "127.0.0.1:0", "--admin", "127.0.0.1:0"), &out, &errb)
		cancel()
		if code != 1 || !strings.HasSuffix(errb.String(), c.want) {
			t.Errorf("%q %v: exit %d, stderr %q; want exit 1 and %q", c.args, c.env, code, errb.String(), c.want)
		}
		for k := range c.env {
			t.Setenv(k, "")
		}
	}
}

// --upstream host:port, as Envoy's clusters write an upstream, failed in
// gateway.New with url.Parse's words for an IP address ("first path
// segment in URL cannot contain colon"); serve now says to write a URL.
func TestServeUpstreamNotAURL(t *testing.T) {
	for _, c := range []struct{ upstream, want string }{
		{"127.0.0.1:9000", "floodgate serve: --upstream 127.0.0.1:9000: not a URL: want http://127.0.0.1:9000 (HTTP/1.1), https://127.0.0.1:9000 (TLS) or h2c://127.0.0.1:9000 (HTTP/2 without TLS)\n"},
		{"localhost:9000", "floodgate serve: --upstream localhost:9000: not a URL: want http://localhost:9000 (HTTP/1.1), https://localhost:9000 (TLS) or h2c://localhost:9000 (HTTP/2 without TLS)\n"},
		{"http:/backend", "floodgate serve: --upstream http:/backend: not a URL: want http://host:port (HTTP/1.1), https://host:port (TLS) or h2c://host:port (HTTP/2 without TLS)\n"},
		// Credentials before the host: the suggestion gave them back in
		// full ("want http://bob:s3cret@127.0.0.1:9000"), beside the
		// redacted value. An upstream takes no user anyway.
		{"bob:s3cret@127.0.0.1:9000", "floodgate serve: --upstream xxxxx@127.0.0.1:9000: not a URL: want http://127.0.0.1:9000 (HTTP/1.1), https://127.0.0.1:9000 (TLS) or h2c://127.0.0.1:9000 (HTTP/2 without TLS)\n"},
		{"s3cret@backend:9000", "floodgate serve: --upstream xxxxx@backend:9000: not a URL: want http://backend:9000 (HTTP/1.1), https://backend:9000 (TLS) or h2c://backend:9000 (HTTP/2 without TLS)\n"},
	} {
		var out, errb strings.Builder
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		code := run(ctx, []string{"serve", "--config", "../../examples/gateway", "--upstream", c.upstream,
			"--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, &out, &errb)
		cancel()
		if code != 1 || !strings.HasSuffix(errb.String(), c.want) {
			t.Errorf("--upstream %s: exit %d, stderr %q; want exit 1 and %q", c.upstream, code, errb.String(), c.want)
		}
		if strings.Contains(errb.String(), "s3cret") {
			t.Errorf("--upstream %s: stderr shows the password: %q", c.upstream, errb.String())
		}
	}
}
