package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// benchLimitConfig is 100 requests a day for every value of key "k": a
// run of 300 requests is admitted 100 times and rejected 200 times.
const benchLimitConfig = "domain: bench\ndescriptors:\n  - key: k\n    rate_limit: {algorithm: fixed_window, unit: day, requests_per_unit: 100}\n"

// runBenchArgs runs floodgate bench with args and returns its exit code,
// stdout and stderr.
func runBenchArgs(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"bench", "-q", "-domain", "bench", "-n", "300", "-c", "4", "-d", "0"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// bench load-tests a server with mTLS over gRPC, /json and /v1: each
// protocol's key gets 100 of its 300 requests admitted. Without -tls-ca the
// server's certificate is not trusted, and bench says so; without a client
// certificate the server refuses the handshake.
func TestBenchTLS(t *testing.T) {
	ca := newTestCA(t, "test CA")
	cert, key, caFile := tlsFilesFor(t, ca)
	dir, _ := writeConfig(t, benchLimitConfig)
	clientCert, clientKey := ca.issue(t, 7, true, "bench.example")
	cdir := t.TempDir()
	clientCertFile, clientKeyFile := filepath.Join(cdir, "client.crt"), filepath.Join(cdir, "client.key")
	writeFile(t, clientCertFile, clientCert)
	writeFile(t, clientKeyFile, clientKey)
	otherCert, otherKey := newTestCA(t, "other CA").issue(t, 8, true, "bench.example")
	otherCertFile, otherKeyFile := filepath.Join(cdir, "other.crt"), filepath.Join(cdir, "other.key")
	writeFile(t, otherCertFile, otherCert)
	writeFile(t, otherKeyFile, otherKey)
	out, errb, stop := startServe(t, "--config", dir, "--reload-interval", "0", "--tls-cert", cert, "--tls-key", key, "--tls-client-ca", caFile)
	defer func() {
		if code := stop(); code != 0 {
			t.Errorf("serve: exit %d after cancel: %s", code, errb.String())
		}
	}()
	httpAddr, grpcAddr, _ := serveAddrs(t, out.String())
	mtls := []string{"-tls-ca", caFile, "-tls-cert", clientCertFile, "-tls-key", clientKeyFile}

	for _, r := range []struct {
		name string
		args []string
	}{
		{"grpc", []string{"-p", "grpc", "-addr", grpcAddr, "-tls"}},
		{"json", []string{"-p", "json", "-addr", httpAddr, "-tls"}},
		{"v1 https://", []string{"-p", "v1", "-addr", "https://" + httpAddr}},
		{"grpc -tls-server-name", []string{"-p", "grpc", "-addr", grpcAddr, "-tls", "-tls-server-name", "127.0.0.1"}},
	} {
		args := append(append(r.args, mtls...), "-D", "k="+r.name)
		code, stdout, stderr := runBenchArgs(args...)
		if code != 0 || !strings.Contains(stdout, "admitted    100 (33.3%)\n") || !strings.Contains(stdout, "rejected    200 (66.7%)\n") ||
			!strings.Contains(stdout, "errors      0 ") {
			t.Errorf("%s: bench %v: exit %d, stdout %s, stderr %s; want 100 admitted, 200 rejected, no errors", r.name, args, code, stdout, stderr)
		}
	}

	for _, r := range []struct {
		name string
		args []string
		want []string
	}{
		{"grpc, no -tls-ca", []string{"-p", "grpc", "-addr", grpcAddr, "-tls", "-tls-cert", clientCertFile, "-tls-key", clientKeyFile},
			[]string{"x509: certificate signed by unknown authority", "the server's certificate was not verified"}},
		{"json, no -tls-ca", []string{"-p", "json", "-addr", httpAddr, "-tls", "-tls-cert", clientCertFile, "-tls-key", clientKeyFile},
			[]string{"x509: certificate signed by unknown authority", "the server's certificate was not verified"}},
		{"json, another name", []string{"-p", "json", "-addr", httpAddr, "-tls", "-tls-ca", caFile, "-tls-cert", clientCertFile, "-tls-key", clientKeyFile,
			"-tls-server-name", "other.example"}, []string{"x509: certificate is not valid for any names, but wanted to match other.example"}},
		{"json, no client certificate", []string{"-p", "json", "-addr", httpAddr, "-tls", "-tls-ca", caFile},
			[]string{"certificate required", "no request answered: the server requires a client certificate (serve --tls-client-ca): give -tls-cert FILE and -tls-key FILE"}},
		{"grpc, no client certificate", []string{"-p", "grpc", "-addr", grpcAddr, "-tls", "-tls-ca", caFile},
			[]string{"certificate required", "no request answered: the server requires a client certificate (serve --tls-client-ca): give -tls-cert FILE and -tls-key FILE"}},
		// A client certificate of another CA is not sent at all: the
		// server's alert is the same.
		{"grpc, client certificate of another CA", []string{"-p", "grpc", "-addr", grpcAddr, "-tls", "-tls-ca", caFile, "-tls-cert", otherCertFile, "-tls-key", otherKeyFile},
			[]string{"certificate required", "no request answered: the server requires a client certificate signed by a CA of its --tls-client-ca, and the one of -tls-cert is not"}},
	} {
		code, stdout, stderr := runBenchArgs(append(r.args, "-D", "k=x")...)
		if code != 1 || !strings.Contains(stdout, "errors      300 (100.0%)") {
			t.Errorf("%s: exit %d, stdout %s, stderr %s; want exit 1 and 300 errors", r.name, code, stdout, stderr)
		}
		for _, w := range r.want {
			if !strings.Contains(stdout+stderr, w) {
				t.Errorf("%s: output does not say %q: stdout %s, stderr %s", r.name, w, stdout, stderr)
			}
		}
	}
}

func TestBenchTLSBadFlags(t *testing.T) {
	ca := newTestCA(t, "test CA")
	cert, key, caFile := tlsFilesFor(t, ca)
	dir := t.TempDir()
	notPEM, missing := filepath.Join(dir, "not.pem"), filepath.Join(dir, "missing.pem")
	writeFile(t, notPEM, []byte("hello\n"))
	_, otherKey := ca.issue(t, 2, false, "")
	wrongKey := filepath.Join(dir, "wrong.key")
	writeFile(t, wrongKey, otherKey)
	for _, r := range []struct {
		args []string
		want string
	}{
		{[]string{"-tls-ca", caFile}, "floodgate bench: -tls-ca " + caFile + ": only with -tls (or an https:// -addr)\n"},
		{[]string{"-tls-server-name", "x"}, "floodgate bench: -tls-server-name x: only with -tls (or an https:// -addr)\n"},
		{[]string{"-tls-cert", cert, "-tls-key", key}, "floodgate bench: -tls-cert " + cert + ": only with -tls (or an https:// -addr)\n-tls-key " + key + ": only with -tls"},
		{[]string{"-tls", "-tls-cert", cert}, "floodgate bench: -tls-cert " + cert + ": needs -tls-key too (the client certificate's private key, PEM)\n"},
		{[]string{"-tls", "-tls-key", key}, "floodgate bench: -tls-key " + key + ": needs -tls-cert too (the client certificate chain, PEM)\n"},
		{[]string{"-p", "grpc", "-addr", "https://127.0.0.1:8081"}, "floodgate bench: -addr https://127.0.0.1:8081: -p grpc takes host:port (for TLS, add -tls)\n"},
		// serve's --http URL with the default -p grpc: not a TLS matter.
		{[]string{"-addr", "http://127.0.0.1:8080/json"}, "floodgate bench: -addr http://127.0.0.1:8080/json: -p grpc (the default) takes host:port, serve's --grpc address (127.0.0.1:8081 by default); a URL is for -p json or v1 (serve's --http address) or -p http\n"},
		{[]string{"-p", "grpc", "-addr", "h2c://127.0.0.1:8081"}, "floodgate bench: -addr h2c://127.0.0.1:8081: -p grpc (the default) takes host:port"},
		{[]string{"-p", "json", "-addr", "http://127.0.0.1:8080", "-tls"}, "floodgate bench: -addr http://127.0.0.1:8080: plaintext http:// with -tls (use https:// or host:port)\n"},
		{[]string{"-tls", "-tls-ca", missing}, "floodgate bench: -tls-ca " + missing + ": no such file or directory\n"},
		{[]string{"-tls", "-tls-ca", notPEM}, "floodgate bench: -tls-ca " + notPEM + ": no PEM certificate in the file\n"},
		{[]string{"-tls", "-tls-cert", cert, "-tls-key", missing}, "floodgate bench: -tls-key " + missing + ": stat " + missing + ": no such file or directory\n"},
		{[]string{"-tls", "-tls-cert", cert, "-tls-key", wrongKey}, "floodgate bench: -tls-cert " + cert + ", -tls-key " + wrongKey + ": tls: private key does not match public key\n"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), append([]string{"bench", "-n", "1"}, r.args...), &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), r.want) {
			t.Errorf("bench %v: exit %d, stderr %q; want exit 2 saying %q", r.args, code, errb.String(), r.want)
		}
	}
}
