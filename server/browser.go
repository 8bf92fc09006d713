package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// crossOrigin tells the requests a browser sent for a page of another site
// (Sec-Fetch-Site, else Origin against Host). GET, HEAD and OPTIONS pass:
// none of the guarded endpoints changes anything on them.
var crossOrigin = http.NewCrossOriginProtection()

// browserSafe answers 403 and returns false for a request that a web page
// the operator visits may have made without the operator's intent, to an
// endpoint guarded by no token (what names it in the message):
//
//   - a state-changing request sent from another site (CSRF): an HTML form
//     or fetch posts text/plain or form bodies without a CORS preflight,
//     and the admin API and /v1/observe read those as JSON, so a page could
//     reset keys or push adaptive limits down on a loopback listener;
//   - with checkHost, a request addressed to a host name that is not
//     localhost (DNS rebinding): a page served from evil.example that
//     re-points its name at 127.0.0.1 is same-origin with itself and can
//     read and change everything the listener serves. A browser addresses
//     an IP literal or localhost only to that address itself, so those
//     Hosts pass; an empty Host (HTTP/1.0, which no browser sends) too.
func browserSafe(w http.ResponseWriter, r *http.Request, what string, checkHost bool) bool {
	if err := crossOrigin.Check(r); err != nil {
		from := r.Header.Get("Origin")
		if from == "" {
			from = "another site"
		}
		writeError(w, http.StatusForbidden, fmt.Sprintf("cross-origin request refused: %s %s was sent by a web page of %s, "+
			"which may not call %s; call it from curl or a script (no Origin or Sec-Fetch-Site field)", r.Method, r.URL.Path, from, what))
		return false
	}
	if checkHost && !hostSafe(w, r, what) {
		return false
	}
	return true
}

// hostSafe answers 403 and returns false for a request addressed to a host
// name that is not localhost (DNS rebinding: see browserSafe), naming what
// refuses it.
func hostSafe(w http.ResponseWriter, r *http.Request, what string) bool {
	if localHost(r.Host) {
		return true
	}
	writeError(w, http.StatusForbidden, fmt.Sprintf("Host %q refused: without a token %s answers requests addressed to an IP address "+
		"or localhost only, as a web page could otherwise reach it through a host name of its own (DNS rebinding); "+
		"address it by IP (e.g. 127.0.0.1), or set --admin-token to use a host name", r.Host, what))
	return false
}

// listenAddrKey is the context key under which Serve puts the address a
// listener is bound to (http.Server.BaseContext), so that a handler can
// tell a loopback listener from a wildcard one (0.0.0.0, whose
// connections' local addresses are the host's own).
type listenAddrKey struct{}

// withListenAddr is an http.Server's BaseContext recording its listener's
// address for loopbackListener.
func withListenAddr(l net.Listener) context.Context {
	return context.WithValue(context.Background(), listenAddrKey{}, l.Addr())
}

// loopbackListener reports whether r arrived on a listener bound to a
// loopback address: the one Serve recorded, else (a handler served by
// another http.Server, e.g. httptest's) the connection's local address.
// A request without either (a handler called directly) is not.
func loopbackListener(r *http.Request) bool {
	a, ok := r.Context().Value(listenAddrKey{}).(net.Addr)
	if !ok {
		if a, ok = r.Context().Value(http.LocalAddrContextKey).(net.Addr); !ok {
			return false
		}
	}
	ap, err := netip.ParseAddrPort(a.String())
	return err == nil && ap.Addr().Unmap().IsLoopback()
}

// localHost reports whether host (a Host field, with or without a port)
// is empty, an IP literal, localhost or a name under .localhost, which
// browsers resolve to loopback themselves (RFC 6761).
func localHost(host string) bool {
	if host == "" {
		return true
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	return host == "localhost" || strings.HasSuffix(host, ".localhost")
}
