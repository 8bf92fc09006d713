package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate/internal/fileread"
	"github.com/floodgate/floodgate/server"
)

// tlsListenerNames are the listeners --tls-listeners can name, in the order
// errors and logs list them.
var tlsListenerNames = []string{"grpc", "http", "api", "admin"}

// defaultTLSListeners are the listeners that speak TLS when --tls-cert is
// given without --tls-listeners. The admin address stays plaintext: it is on
// the loopback by default, and Kubernetes httpGet probes and Prometheus
// scrapes pointed at it would break if a certificate turned it to HTTPS.
var defaultTLSListeners = []string{"grpc", "http", "api"}

// checkTLS returns what is wrong with the TLS flags' combination (files
// are read later, by loadTLS), each as check's lines.
func (f *serveFlags) checkTLS() []error {
	var errs []error
	switch {
	case f.tlsCert != "" && f.tlsKey == "":
		errs = append(errs, fmt.Errorf("%s: needs %s too (the certificate's private key, PEM)", f.origin("tls-cert", f.tlsCert), f.flag("tls-key")))
	case f.tlsKey != "" && f.tlsCert == "":
		errs = append(errs, fmt.Errorf("%s: needs %s too (the certificate chain, PEM)", f.origin("tls-key", f.tlsKey), f.flag("tls-cert")))
	}
	if f.tlsCert == "" {
		for _, o := range []struct{ name, value string }{
			{"tls-client-ca", f.tlsClientCA}, {"tls-client-san", f.tlsClientSAN}, {"tls-listeners", f.tlsListeners}} {
			if o.value != "" {
				errs = append(errs, fmt.Errorf("%s: only with --tls-cert and --tls-key", f.origin(o.name, o.value)))
			}
		}
	}
	if f.tlsClientSAN != "" && f.tlsClientCA == "" {
		errs = append(errs, fmt.Errorf("%s: only with --tls-client-ca (the name is checked in verified client certificates)", f.origin("tls-client-san", f.tlsClientSAN)))
	}
	if _, err := parseTLSListeners(f.tlsListeners); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", f.origin("tls-listeners", f.tlsListeners), err))
	}
	return errs
}

// parseTLSListeners reads --tls-listeners: a comma-separated subset of
// tlsListenerNames; "" is defaultTLSListeners.
func parseTLSListeners(s string) (map[string]bool, error) {
	names := defaultTLSListeners
	if strings.TrimSpace(s) != "" {
		names = strings.Split(s, ",")
	}
	on := map[string]bool{}
	for _, n := range names {
		n = strings.TrimSpace(n)
		if !slices.Contains(tlsListenerNames, n) {
			return nil, fmt.Errorf("unknown listener %q: want a comma-separated list of %s", n, strings.Join(tlsListenerNames, ", "))
		}
		on[n] = true
	}
	return on, nil
}

// serverTLS holds the server's certificate and client CAs, as last loaded
// from their files, and reloads them: every handshake takes the current
// ones, so a rotated certificate is served from the next connection on.
type serverTLS struct {
	f   *serveFlags
	cur atomic.Pointer[tlsFiles]

	mu      sync.Mutex // serialises reload
	lastErr string     // the last reload error, said once until it changes
}

// tlsFiles is one load of the files: their contents, to see a change, and
// what was parsed from them.
type tlsFiles struct {
	certPEM, keyPEM, caPEM []byte
	cert                   tls.Certificate
	clientCAs              *x509.CertPool // nil: no client certificates asked for
}

// loadTLS reads the TLS files of f; nil when --tls-cert is not set.
func loadTLS(f *serveFlags) (*serverTLS, error) {
	if f.tlsCert == "" {
		return nil, nil
	}
	s := &serverTLS{f: f}
	files, err := s.read()
	if err != nil {
		return nil, err
	}
	s.cur.Store(files)
	return s, nil
}

// maxPEMFile bounds a certificate, key or CA file: a chain or a bundle of
// CAs takes a few hundred KiB at most.
const maxPEMFile = 4 << 20

// read reads and parses the files, naming the flag (or variable) of the one
// that fails.
func (s *serverTLS) read() (*tlsFiles, error) {
	f := s.f
	var t tlsFiles
	var err error
	if t.certPEM, err = fileread.Read(f.tlsCert, maxPEMFile); err != nil {
		return nil, fmt.Errorf("%s: %w", f.origin("tls-cert", f.tlsCert), err)
	}
	if t.keyPEM, err = fileread.Read(f.tlsKey, maxPEMFile); err != nil {
		return nil, fmt.Errorf("%s: %w", f.origin("tls-key", f.tlsKey), err)
	}
	if t.cert, err = tls.X509KeyPair(t.certPEM, t.keyPEM); err != nil {
		return nil, fmt.Errorf("%s, %s: %w", f.origin("tls-cert", f.tlsCert), f.origin("tls-key", f.tlsKey), err)
	}
	if f.tlsClientCA != "" {
		if t.clientCAs, t.caPEM, err = readCAFile(f.origin("tls-client-ca", f.tlsClientCA), f.tlsClientCA); err != nil {
			return nil, err
		}
	}
	return &t, nil
}

// readCAFile reads the PEM certificates of a CA file (serve's
// --tls-client-ca, bench's -tls-ca) into a pool; it returns the file's
// contents too. An error starts with flag, the option that named the file.
func readCAFile(flag, file string) (*x509.CertPool, []byte, error) {
	b, err := fileread.Read(file, maxPEMFile)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", flag, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, nil, fmt.Errorf("%s: no PEM certificate in the file", flag)
	}
	return pool, b, nil
}

// reload rereads the files. It returns the new certificate's description
// when they changed and loaded, "" when they did not change; on an error
// the previous files stay in force, and the error is returned only when it
// differs from the previous reload's (a half-written rotation is retried
// at the next reload without repeating itself).
func (s *serverTLS) reload() (changed string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.read()
	if err != nil {
		if err.Error() == s.lastErr {
			return "", nil
		}
		s.lastErr = err.Error()
		return "", err
	}
	s.lastErr = ""
	old := s.cur.Load()
	if bytes.Equal(old.certPEM, t.certPEM) && bytes.Equal(old.keyPEM, t.keyPEM) && bytes.Equal(old.caPEM, t.caPEM) {
		return "", nil
	}
	s.cur.Store(t)
	return t.describe(), nil
}

// describe names the certificate served: its subject and expiry.
func (t *tlsFiles) describe() string {
	leaf := t.cert.Leaf
	if leaf == nil {
		return "certificate"
	}
	return fmt.Sprintf("certificate %q (serial %s) valid until %s", leaf.Subject.String(), leaf.SerialNumber, leaf.NotAfter.UTC().Format(time.RFC3339))
}

// config returns a listener's tls.Config offering nextProtos by ALPN. The
// certificate and client CAs are the current ones at each handshake.
func (s *serverTLS) config(nextProtos ...string) *tls.Config {
	base := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: nextProtos}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		t := s.cur.Load()
		c := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: nextProtos, Certificates: []tls.Certificate{t.cert}}
		if t.clientCAs != nil {
			c.ClientAuth = tls.RequireAndVerifyClientCert
			c.ClientCAs = t.clientCAs
			// A resumed session skips the client's certificate: after the
			// client CA file is rotated, a ticket from before would let in
			// a client the new CA does not vouch for. Every connection
			// verifies its certificate (gRPC and keep-alive connections
			// are long-lived, so the cost is small).
			c.SessionTicketsDisabled = true
			if san := s.f.tlsClientSAN; san != "" {
				c.VerifyConnection = func(cs tls.ConnectionState) error {
					return checkClientSAN(cs.PeerCertificates[0], san)
				}
			}
		}
		return c, nil
	}
	return base
}

// checkClientSAN returns why leaf, a verified client certificate, does not
// carry name (--tls-client-san) among its SANs, or nil when it does. A DNS
// name is compared with each DNS SAN as a string, in any case, as
// envoyproxy/ratelimit's GRPC_CLIENT_TLS_SAN does: a wildcard SAN
// (*.ns.svc) is a name of its own, not a pattern that api.ns.svc matches —
// x509's VerifyHostname, which matches as a client checks a server, let any
// client certificate for *.ns.svc from the CA pass as api.ns.svc. An IP
// address (name parses as one) is compared with the IP SANs only.
func checkClientSAN(leaf *x509.Certificate, name string) error {
	if ip, err := netip.ParseAddr(strings.Trim(name, "[]")); err == nil {
		for _, a := range leaf.IPAddresses {
			if got, ok := netip.AddrFromSlice(a); ok && got.Unmap() == ip.Unmap() {
				return nil
			}
		}
	} else {
		for _, d := range leaf.DNSNames {
			if strings.EqualFold(d, name) {
				return nil
			}
		}
	}
	var sans []string
	for _, d := range leaf.DNSNames {
		sans = append(sans, "DNS:"+d)
	}
	for _, a := range leaf.IPAddresses {
		sans = append(sans, "IP:"+a.String())
	}
	have := "none"
	if len(sans) > 0 {
		have = strings.Join(sans, ", ")
	}
	return fmt.Errorf("client certificate refused by --tls-client-san: %q is not among its SANs (%s; compared exactly, a wildcard SAN is not expanded)", name, have)
}

// wrap puts TLS on the HTTP listeners that on names. The gateway's (--http
// with --upstream) offers h2 and http/1.1 by ALPN, so that gRPC clients
// and browsers reach it over HTTP/2 (a websocket client asks for HTTP/1.1);
// the others offer HTTP/1.1 only, as they speak over plaintext. gRPC gets
// its TLS from its credentials.
func (s *serverTLS) wrap(ls *server.Listeners, on map[string]bool) {
	for _, l := range []struct {
		name string
		l    *net.Listener
	}{{"http", &ls.HTTP}, {"api", &ls.API}, {"admin", &ls.Admin}} {
		if on[l.name] && *l.l != nil {
			protos := []string{"http/1.1"}
			if l.name == "http" && s.f.upstream != "" {
				protos = []string{"h2", "http/1.1"}
			}
			*l.l = tls.NewListener(*l.l, s.config(protos...))
		}
	}
}

// watch reloads the files on every tick of every (none when 0) and on
// every signal from hup, until ctx is done; each change and each failure
// is a "tls" event of srv.
func (s *serverTLS) watch(ctx context.Context, every time.Duration, hup <-chan os.Signal, srv *server.Server) {
	var tick <-chan time.Time
	if every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		case <-hup:
		}
		changed, err := s.reload()
		switch {
		case err != nil:
			srv.Warn("tls", "TLS files not reloaded, the previous certificate stays in force: "+err.Error())
		case changed != "":
			srv.Event("tls", "TLS files reloaded: serving "+changed)
		}
	}
}

// tlsNames lists the TLS listeners that are open, in tlsListenerNames'
// order.
func tlsNames(on map[string]bool, api bool) string {
	var names []string
	for _, n := range tlsListenerNames {
		if on[n] && (n != "api" || api) {
			names = append(names, n)
		}
	}
	return strings.Join(names, ",")
}

// tlsNote is the end of serve's stdout line: which listeners speak TLS.
func tlsNote(s *serverTLS, on map[string]bool, api bool) string {
	if s == nil {
		return ""
	}
	mode := "TLS"
	if s.f.tlsClientCA != "" {
		mode = "mTLS"
	}
	return fmt.Sprintf(", %s on %s", mode, tlsNames(on, api))
}
