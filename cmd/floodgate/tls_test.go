package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
	pool *x509.CertPool
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pool: x509.NewCertPool()}
	ca.pool.AddCert(cert)
	return ca
}

// issue returns a certificate and its key, PEM, signed by ca: for the
// server (127.0.0.1) or a client (with dnsName as its SAN).
func (ca *testCA) issue(t *testing.T, serial int64, client bool, dnsName string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "floodgate test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		if dnsName != "" {
			tmpl.DNSNames = []string{dnsName}
		}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// clientCert is a tls.Certificate for a client, signed by ca.
func (ca *testCA) clientCert(t *testing.T, dnsName string) tls.Certificate {
	t.Helper()
	c, k := ca.issue(t, 7, true, dnsName)
	cert, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// writeFile writes b to path by a rename, as kubelet swaps a secret's
// files, so that a reload never reads half a file.
func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// tlsFilesFor writes a server certificate (serial 1) from ca, its key and
// ca's certificate into a new folder; it returns their paths.
func tlsFilesFor(t *testing.T, ca *testCA) (cert, key, caFile string) {
	t.Helper()
	dir := t.TempDir()
	cert, key, caFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
	c, k := ca.issue(t, 1, false, "")
	writeFile(t, cert, c)
	writeFile(t, key, k)
	writeFile(t, caFile, ca.pem)
	return cert, key, caFile
}

// serveAddrs reads the listeners' addresses from serve's stdout line.
func serveAddrs(t *testing.T, out string) (httpAddr, grpcAddr, adminAddr string) {
	t.Helper()
	m := regexp.MustCompile(`http (\S+), grpc (\S+), admin (\S+) `).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no addresses in serve's stdout %q", out)
	}
	return m[1], m[2], m[3]
}

const tlsTestBody = `{"domain":"api","descriptors":[{"entries":[{"key":"remote_address","value":"203.0.113.7"}]}]}`

// shouldRateLimit calls ShouldRateLimit on addr with creds.
func shouldRateLimit(addr string, creds credentials.TransportCredentials) (*rlsv3.RateLimitResponse, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "api",
		Descriptors: []*commonrl.RateLimitDescriptor{{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "203.0.113.7"}}}}})
}

// postJSON posts tlsTestBody to url/json with client.
func postJSON(client *http.Client, url string) (int, string, error) {
	resp, err := client.Post(url+"/json", "application/json", strings.NewReader(tlsTestBody))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

func httpsClient(cfg *tls.Config) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

// With --tls-cert, gRPC (ShouldRateLimit and health) and /json answer over
// TLS and refuse plaintext; the admin address stays plaintext by default;
// the drain still exits 0.
func TestServeTLS(t *testing.T) {
	ca := newTestCA(t, "test CA")
	cert, key, _ := tlsFilesFor(t, ca)
	out, errb, stop := startServe(t, "--reload-interval", "0", "--tls-cert", cert, "--tls-key", key)
	httpAddr, grpcAddr, adminAddr := serveAddrs(t, out.String())
	if !strings.Contains(out.String(), ", TLS on grpc,http\n") {
		t.Errorf("serve's stdout %q does not say which listeners speak TLS", out.String())
	}

	creds := credentials.NewTLS(&tls.Config{RootCAs: ca.pool})
	resp, err := shouldRateLimit(grpcAddr, creds)
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("ShouldRateLimit over TLS: %v, %v; want OK", resp, err)
	}
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	hc, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
	conn.Close()
	if err != nil || hc.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health over TLS: %v, %v; want SERVING", hc, err)
	}
	if _, err := shouldRateLimit(grpcAddr, insecure.NewCredentials()); err == nil {
		t.Error("ShouldRateLimit in plaintext was answered; want it refused")
	}

	code, body, err := postJSON(httpsClient(&tls.Config{RootCAs: ca.pool}), "https://"+httpAddr)
	if err != nil || code != 200 || !strings.Contains(body, `"overallCode":"OK"`) {
		t.Fatalf("POST https://%s/json: %d %s %v; want 200 OK", httpAddr, code, body, err)
	}
	if code, body, err := postJSON(http.DefaultClient, "http://"+httpAddr); err == nil && code == 200 {
		t.Errorf("POST http://%s/json in plaintext: %d %s; want it refused", httpAddr, code, body)
	}
	// TLS 1.1 is refused.
	if c, err := tls.Dial("tcp", httpAddr, &tls.Config{RootCAs: ca.pool, MaxVersion: tls.VersionTLS11}); err == nil {
		c.Close()
		t.Error("a TLS 1.1 handshake succeeded; want TLS 1.2 at least")
	}
	r, err := http.Get("http://" + adminAddr + "/healthz")
	if err != nil || r.StatusCode != 200 {
		t.Errorf("GET http://%s/healthz (admin stays plaintext by default): %v %v", adminAddr, r, err)
	} else {
		r.Body.Close()
	}
	if code := stop(); code != 0 {
		t.Fatalf("exit %d after cancel: %s", code, errb.String())
	}
}

// With --tls-client-ca, a client without a certificate, or with one from
// another CA, is refused on every TLS listener; one with a certificate from
// the CA is served. --tls-client-san also requires a name in it.
func TestServeMTLS(t *testing.T) {
	ca := newTestCA(t, "test CA")
	cert, key, caFile := tlsFilesFor(t, ca)
	good := ca.clientCert(t, "envoy.example")
	other := newTestCA(t, "other CA").clientCert(t, "envoy.example")
	out, errb, stop := startServe(t, "--reload-interval", "0", "--tls-cert", cert, "--tls-key", key, "--tls-client-ca", caFile,
		"--tls-listeners", "grpc,http,admin")
	defer func() {
		if code := stop(); code != 0 {
			t.Errorf("exit %d after cancel: %s", code, errb.String())
		}
	}()
	httpAddr, grpcAddr, adminAddr := serveAddrs(t, out.String())
	if !strings.Contains(out.String(), "(dashboard https://") || !strings.Contains(out.String(), ", mTLS on grpc,http,admin\n") {
		t.Errorf("serve's stdout %q: want the dashboard on https and mTLS on grpc,http,admin", out.String())
	}
	for _, c := range []struct {
		name  string
		certs []tls.Certificate
		ok    bool
	}{{"no certificate", nil, false}, {"another CA's certificate", []tls.Certificate{other}, false}, {"the CA's certificate", []tls.Certificate{good}, true}} {
		cfg := &tls.Config{RootCAs: ca.pool, Certificates: c.certs}
		resp, err := shouldRateLimit(grpcAddr, credentials.NewTLS(cfg))
		if (err == nil) != c.ok {
			t.Errorf("%s: ShouldRateLimit: %v, %v; want answered: %v", c.name, resp, err, c.ok)
		}
		code, body, err := postJSON(httpsClient(cfg), "https://"+httpAddr)
		if (err == nil && code == 200) != c.ok {
			t.Errorf("%s: POST /json: %d %s %v; want answered: %v", c.name, code, body, err, c.ok)
		}
		r, err := httpsClient(cfg).Get("https://" + adminAddr + "/healthz")
		if (err == nil && r.StatusCode == 200) != c.ok {
			t.Errorf("%s: GET admin /healthz: %v %v; want answered: %v", c.name, r, err, c.ok)
		}
		if err == nil {
			r.Body.Close()
		}
	}
}

func TestServeMTLSClientSAN(t *testing.T) {
	ca := newTestCA(t, "test CA")
	cert, key, caFile := tlsFilesFor(t, ca)
	out, errb, stop := startServe(t, "--reload-interval", "0", "--tls-cert", cert, "--tls-key", key, "--tls-client-ca", caFile,
		"--tls-client-san", "envoy.example")
	defer func() {
		if code := stop(); code != 0 {
			t.Errorf("exit %d after cancel: %s", code, errb.String())
		}
	}()
	_, grpcAddr, _ := serveAddrs(t, out.String())
	for name, ok := range map[string]bool{"envoy.example": true, "other.example": false} {
		cfg := &tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{ca.clientCert(t, name)}}
		if resp, err := shouldRateLimit(grpcAddr, credentials.NewTLS(cfg)); (err == nil) != ok {
			t.Errorf("client certificate for %s: ShouldRateLimit %v, %v; want answered: %v", name, resp, err, ok)
		}
	}
}

func TestServeTLSBadFlags(t *testing.T) {
	ca := newTestCA(t, "test CA")
	cert, key, caFile := tlsFilesFor(t, ca)
	_, otherKey := ca.issue(t, 2, false, "")
	dir := t.TempDir()
	wrongKey := filepath.Join(dir, "wrong.key")
	writeFile(t, wrongKey, otherKey)
	notPEM := filepath.Join(dir, "not.pem")
	writeFile(t, notPEM, []byte("hello\n"))
	missing := filepath.Join(dir, "missing.pem")
	addrs := []string{"--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--admin", "127.0.0.1:0"}
	for _, r := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--tls-cert", cert}, nil, "floodgate serve: --tls-cert " + cert + ": needs --tls-key too (the certificate's private key, PEM)\n"},
		{[]string{"--tls-key", key}, nil, "floodgate serve: --tls-key " + key + ": needs --tls-cert too (the certificate chain, PEM)\n"},
		{nil, map[string]string{"FLOODGATE_TLS_CERT": cert}, "floodgate serve: FLOODGATE_TLS_CERT=\"" + cert + "\": needs --tls-key too"},
		{[]string{"--tls-client-ca", caFile}, nil, "floodgate serve: --tls-client-ca " + caFile + ": only with --tls-cert and --tls-key\n"},
		{[]string{"--tls-listeners", "grpc"}, nil, "floodgate serve: --tls-listeners grpc: only with --tls-cert and --tls-key\n"},
		{[]string{"--tls-cert", cert, "--tls-key", key, "--tls-client-san", "envoy"}, nil,
			"floodgate serve: --tls-client-san envoy: only with --tls-client-ca (the name is checked in verified client certificates)\n"},
		{[]string{"--tls-cert", cert, "--tls-key", key, "--tls-listeners", "grpc,htp"}, nil,
			"floodgate serve: --tls-listeners grpc,htp: unknown listener \"htp\": want a comma-separated list of grpc, http, api, admin\n"},
		{[]string{"--tls-cert", cert, "--tls-key", key}, map[string]string{"FLOODGATE_TLS_LISTENERS": "debug"}, "floodgate serve: FLOODGATE_TLS_LISTENERS=\"debug\": unknown listener \"debug\""},
		{[]string{"--tls-cert", missing, "--tls-key", key}, nil, "floodgate serve: --tls-cert " + missing + ": no such file or directory\n"},
		{[]string{"--tls-cert", cert, "--tls-key", missing}, nil, "floodgate serve: --tls-key " + missing + ": no such file or directory\n"},
		{[]string{"--tls-cert", cert, "--tls-key", wrongKey}, nil,
			"floodgate serve: --tls-cert " + cert + ", --tls-key " + wrongKey + ": tls: private key does not match public key\n"},
		{[]string{"--tls-cert", notPEM, "--tls-key", key}, nil, "floodgate serve: --tls-cert " + notPEM + ", --tls-key " + key + ": tls: failed to find any PEM data in certificate input\n"},
		{[]string{"--tls-cert", cert, "--tls-key", key, "--tls-client-ca", notPEM}, nil, "floodgate serve: --tls-client-ca " + notPEM + ": no PEM certificate in the file\n"},
		{[]string{"--tls-cert", cert, "--tls-key", key}, map[string]string{"FLOODGATE_TLS_CLIENT_CA": missing},
			"floodgate serve: FLOODGATE_TLS_CLIENT_CA=\"" + missing + "\": no such file or directory\n"},
	} {
		for k, v := range r.env {
			t.Setenv(k, v)
		}
		var out, errb bytes.Buffer
		args := append(append([]string{"serve"}, addrs...), r.args...)
		code := run(context.Background(), args, &out, &errb)
		if code != 1 || !strings.Contains(errb.String(), r.want) {
			t.Errorf("%v %v: exit %d, stderr %q; want exit 1 saying %q", r.args, r.env, code, errb.String(), r.want)
		}
		for k := range r.env {
			t.Setenv(k, "")
		}
	}
}

// servedSerial connects to addr and returns the serial of the certificate
// it serves.
func servedSerial(t *testing.T, addr string, pool *x509.CertPool) int64 {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatalf("TLS to %s: %v", addr, err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

// waitSerial waits until addr serves the certificate of serial want.
func waitSerial(t *testing.T, addr string, pool *x509.CertPool, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for servedSerial(t, addr, pool) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s still serves certificate %d 10s after the rotation, want %d", addr, servedSerial(t, addr, pool), want)
		}
		time.Sleep(20 * time.Millisecond) // waiting for the reload tick, not for math
	}
}

// A certificate rewritten in place is served from the next connection on,
// by the reload ticker (--reload-interval) and by SIGHUP; a key that does
// not match keeps the previous pair in force, with a warning said once.
func TestServeTLSRotation(t *testing.T) {
	ca := newTestCA(t, "test CA")
	cert, key, _ := tlsFilesFor(t, ca)
	out, errb, stop := startServe(t, "--reload-interval", "100ms", "--tls-cert", cert, "--tls-key", key)
	defer func() {
		if code := stop(); code != 0 {
			t.Errorf("exit %d after cancel: %s", code, errb.String())
		}
	}()
	httpAddr, grpcAddr, _ := serveAddrs(t, out.String())
	if got := servedSerial(t, httpAddr, ca.pool); got != 1 {
		t.Fatalf("serves certificate %d, want 1", got)
	}
	c2, k2 := ca.issue(t, 2, false, "")
	writeFile(t, key, k2)
	writeFile(t, cert, c2)
	waitSerial(t, httpAddr, ca.pool, 2)
	waitSerial(t, grpcAddr, ca.pool, 2)
	if resp, err := shouldRateLimit(grpcAddr, credentials.NewTLS(&tls.Config{RootCAs: ca.pool})); err != nil {
		t.Fatalf("ShouldRateLimit after the rotation: %v, %v", resp, err)
	}

	// Half a rotation: a new key under the old certificate. (The rotation
	// above may have been seen half done too, and warned: count from here.)
	before := strings.Count(errb.String(), "TLS files not reloaded")
	_, k3 := ca.issue(t, 3, false, "")
	writeFile(t, key, k3)
	waitLog(t, errb, "tls: private key does not match public key")
	if got := servedSerial(t, httpAddr, ca.pool); got != 2 {
		t.Errorf("after a mismatching key, serves certificate %d, want 2 (the previous pair)", got)
	}
	writeFile(t, key, k2)
	waitSerial(t, httpAddr, ca.pool, 2)
	if n := strings.Count(errb.String(), "TLS files not reloaded") - before; n != 1 {
		t.Errorf("the mismatch was warned %d times, want once: %s", n, errb.String())
	}
}

func TestServeTLSReloadOnSIGHUP(t *testing.T) {
	ca := newTestCA(t, "test CA")
	cert, key, _ := tlsFilesFor(t, ca)
	out, errb, stop := startServe(t, "--reload-interval", "0", "--tls-cert", cert, "--tls-key", key)
	defer func() {
		if code := stop(); code != 0 {
			t.Errorf("exit %d after cancel: %s", code, errb.String())
		}
	}()
	httpAddr, _, _ := serveAddrs(t, out.String())
	c2, k2 := ca.issue(t, 2, false, "")
	writeFile(t, key, k2)
	writeFile(t, cert, c2)
	if got := servedSerial(t, httpAddr, ca.pool); got != 1 {
		t.Fatalf("serves certificate %d before SIGHUP with --reload-interval 0, want 1", got)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog(t, errb, "TLS files reloaded: serving certificate")
	if got := servedSerial(t, httpAddr, ca.pool); got != 2 {
		t.Errorf("serves certificate %d after SIGHUP, want 2", got)
	}
}

// waitLog waits until serve's log says want.
func waitLog(t *testing.T, errb *lockedBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(errb.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the log does not say %q after 10s: %s", want, errb.String())
		}
		time.Sleep(20 * time.Millisecond) // waiting for the reload, not for math
	}
}

// Gateway mode: the proxy listener (--http) and the decision APIs (--api)
// speak TLS; the upstream sees X-Forwarded-Proto https.
func TestServeTLSGateway(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "upstream %s %s", r.URL.Path, r.Header.Get("X-Forwarded-Proto"))
	}))
	defer up.Close()
	ca := newTestCA(t, "test CA")
	cert, key, _ := tlsFilesFor(t, ca)
	_, errb, stop := startServe(t, "--config", gatewayConfigDir(t), "--reload-interval", "0", "--upstream", up.URL, "--api", "127.0.0.1:0",
		"--tls-cert", cert, "--tls-key", key)
	defer func() {
		if code := stop(); code != 0 {
			t.Errorf("exit %d after cancel: %s", code, errb.String())
		}
	}()
	addrs := map[string]string{}
	for _, m := range addrOf.FindAllStringSubmatch(errb.String(), -1) {
		addrs[m[1]] = m[2]
	}
	if !strings.Contains(errb.String(), " tls=grpc,http,api ") {
		t.Errorf("the start-up log does not list grpc,http,api as TLS: %s", errb.String())
	}
	client := httpsClient(&tls.Config{RootCAs: ca.pool})
	resp, err := client.Get("https://" + addrs["http"] + "/ping")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "upstream /ping https" {
		t.Errorf("GET https://…/ping through the gateway: %d %q, want the upstream's answer with https", resp.StatusCode, b)
	}
	if code, body, err := postJSON(client, "https://"+addrs["decision_apis"]); err != nil || code != 200 {
		t.Errorf("POST https://…/json on --api: %d %s %v, want 200", code, body, err)
	}
}
