package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"
)

// sanClientCert is a client certificate from ca with the given DNS and IP
// SANs.
func sanClientCert(t *testing.T, ca *testCA, dns []string, ips []net.IP) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(9), Subject: pkix.Name{CommonName: "client"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, DNSNames: dns, IPAddresses: ips}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// handshake dials ln with cert and reports whether the server accepted it
// (TLS 1.3 tells the client of a refused certificate on its first read).
func handshake(t *testing.T, ln net.Listener, ca *testCA, cert tls.Certificate) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			errc <- err
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		err = c.(*tls.Conn).Handshake()
		if err == nil {
			_, err = c.Write([]byte("ok"))
		}
		errc <- err
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{cert}})
	if err == nil {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 2)
		_, err = c.Read(buf)
		c.Close()
	}
	serr := <-errc
	if serr != nil {
		return serr
	}
	return err
}

// TestSecClientSANExact: --tls-client-san NAME requires NAME itself among
// the client certificate's DNS SANs (in any case), as envoyproxy/ratelimit's
// GRPC_CLIENT_TLS_SAN does: a certificate for *.ns.svc from the trusted CA
// does not pass as api.ns.svc, nor a certificate for a parent or child
// name; an IP address is compared with the IP SANs only.
func TestSecClientSANExact(t *testing.T) {
	ca := newTestCA(t, "test CA")
	cert, key, caFile := tlsFilesFor(t, ca)
	for _, tc := range []struct {
		san  string
		dns  []string
		ips  []net.IP
		ok   bool
		want string
	}{
		{"api.ns.svc", []string{"api.ns.svc"}, nil, true, ""},
		{"api.ns.svc", []string{"other", "API.NS.SVC"}, nil, true, ""},
		{"api.ns.svc", []string{"*.ns.svc"}, nil, false, `"api.ns.svc" is not among its SANs (DNS:*.ns.svc;`},
		{"api.ns.svc", []string{"*.svc", "ns.svc", "x.api.ns.svc"}, nil, false, "not among its SANs"},
		{"api.ns.svc", []string{"other"}, nil, false, "not among its SANs (DNS:other;"},
		{"api.ns.svc", nil, []net.IP{net.IPv4(10, 0, 0, 1)}, false, "(IP:10.0.0.1;"},
		{"10.0.0.1", nil, []net.IP{net.IPv4(10, 0, 0, 1)}, true, ""},
		{"10.0.0.1", []string{"10.0.0.1"}, nil, false, "not among its SANs"},
		{"::1", nil, []net.IP{net.IPv6loopback}, true, ""},
	} {
		f := &serveFlags{tlsCert: cert, tlsKey: key, tlsClientCA: caFile, tlsClientSAN: tc.san}
		st, err := loadTLS(f)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		err = handshake(t, tls.NewListener(ln, st.config("http/1.1")), ca, sanClientCert(t, ca, tc.dns, tc.ips))
		ln.Close()
		if (err == nil) != tc.ok || (!tc.ok && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("--tls-client-san %s, certificate DNS %v IP %v: handshake error %v; want accepted: %v (saying %q)", tc.san, tc.dns, tc.ips, err, tc.ok, tc.want)
		}
	}
}

// TestSecServeClientSANWildcard: through serve, a wildcard client
// certificate is refused on the gRPC, HTTP and admin listeners under
// --tls-client-san; the named one is served on all three.
func TestSecServeClientSANWildcard(t *testing.T) {
	ca := newTestCA(t, "test CA")
	cert, key, caFile := tlsFilesFor(t, ca)
	out, errb, stop := startServe(t, "--reload-interval", "0", "--tls-cert", cert, "--tls-key", key, "--tls-client-ca", caFile,
		"--tls-client-san", "api.ns.svc", "--tls-listeners", "grpc,http,admin")
	defer func() {
		if code := stop(); code != 0 {
			t.Errorf("exit %d after cancel: %s", code, errb.String())
		}
	}()
	httpAddr, grpcAddr, adminAddr := serveAddrs(t, out.String())
	for name, ok := range map[string]bool{"api.ns.svc": true, "*.ns.svc": false} {
		cfg := &tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{sanClientCert(t, ca, []string{name}, nil)}}
		if resp, err := shouldRateLimit(grpcAddr, credentials.NewTLS(cfg)); (err == nil) != ok {
			t.Errorf("client certificate for %s: gRPC ShouldRateLimit %v, %v; want answered: %v", name, resp, err, ok)
		}
		code, body, err := postJSON(httpsClient(cfg), "https://"+httpAddr)
		if (err == nil && code == 200) != ok {
			t.Errorf("client certificate for %s: POST /json: %d %s %v; want answered: %v", name, code, body, err, ok)
		}
		r, err := httpsClient(cfg).Get("https://" + adminAddr + "/healthz")
		if err == nil {
			r.Body.Close()
		}
		if (err == nil && r.StatusCode == 200) != ok {
			t.Errorf("client certificate for %s: admin GET /healthz: %v; want answered: %v", name, err, ok)
		}
	}
}
