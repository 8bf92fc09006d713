package main

import (
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"
)

// resumes connects twice to addr over TLS (at most version maxVersion,
// offering proto by ALPN) with one session cache, and reports whether the
// second handshake resumed the first's session. Each connection reads the
// server's first bytes before it closes: a TLS 1.3 ticket comes after the
// handshake, and the client stores it only as it reads.
func resumes(t *testing.T, addr, proto string, maxVersion uint16, cfg *tls.Config) bool {
	t.Helper()
	cfg = cfg.Clone()
	cfg.MaxVersion, cfg.NextProtos = maxVersion, []string{proto}
	cfg.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	var resumed [2]bool
	for i := range resumed {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
		if err != nil {
			t.Fatalf("connection %d to %s: %v", i+1, addr, err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		hello := "GET /nothing HTTP/1.1\r\nHost: floodgate\r\nConnection: close\r\n\r\n"
		if proto == "h2" {
			hello = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00" // the preface and an empty SETTINGS frame
		}
		if _, err := io.WriteString(c, hello); err != nil {
			t.Fatalf("connection %d to %s: %v", i+1, addr, err)
		}
		if _, err := c.Read(make([]byte, 1)); err != nil {
			t.Fatalf("connection %d to %s: no answer: %v", i+1, addr, err)
		}
		resumed[i] = c.ConnectionState().DidResume
		c.Close()
	}
	if resumed[0] {
		t.Fatalf("%s: the first connection resumed a session", addr)
	}
	return resumed[1]
}

// Under mTLS no connection resumes a session, on the HTTP listener as on
// gRPC, in TLS 1.2 (session tickets) as in 1.3 (PSKs from tickets): a
// resumed session skips the client's certificate, which a client CA rotated
// since might no longer vouch for. Without --tls-client-ca, the same client
// resumes (the check sees resumption where it can happen).
func TestServeTLSSessionResumption(t *testing.T) {
	ca := newTestCA(t, "test CA")
	cert, key, caFile := tlsFilesFor(t, ca)
	client := &tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{ca.clientCert(t, "envoy.example")}}
	for _, mtls := range []bool{false, true} {
		name, args := "TLS", []string{"--reload-interval", "0", "--tls-cert", cert, "--tls-key", key}
		if mtls {
			name, args = "mTLS", append(args, "--tls-client-ca", caFile)
		}
		t.Run(name, func(t *testing.T) {
			out, errb, stop := startServe(t, args...)
			defer func() {
				if code := stop(); code != 0 {
					t.Errorf("exit %d after cancel: %s", code, errb.String())
				}
			}()
			httpAddr, grpcAddr, _ := serveAddrs(t, out.String())
			for _, l := range []struct{ name, addr, proto string }{{"http", httpAddr, "http/1.1"}, {"grpc", grpcAddr, "h2"}} {
				for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
					if got := resumes(t, l.addr, l.proto, v, client); got == mtls {
						t.Errorf("%s listener, %s: second connection resumed: %v, want %v", l.name, tls.VersionName(v), got, !mtls)
					}
				}
			}
		})
	}
}
