package memcached

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/floodgate/floodgate/store"
)

// serverSettings is what Open needs to know of a server, from its
// "stats settings".
type serverSettings struct {
	casEnabled  bool
	itemSizeMax int // 0: not reported
}

// checkServers asks every server for its settings ("stats settings", one
// round trip on a connection of its own) and returns the item size limit
// the store must keep to: the smallest of maxItemSize and the servers'
// item_size_max. It fails when a server cannot be reached (an error
// wrapping store.ErrUnavailable, which may pass), does not answer the text
// protocol, or runs with compare-and-swap disabled (-C), which every
// algorithm but the two windows needs (neither passes by retrying). With
// partial (WithPartialStart), the servers that did not answer (noAnswer)
// are returned instead, in the URL's order, unless none answered: then
// the first one's error is.
func checkServers(addrs []net.Addr, dial dialFunc, useTLS bool, timeout time.Duration, maxItemSize int, partial bool) (int, []UnansweredServer, error) {
	var down []UnansweredServer
	var first error
	for _, a := range addrs {
		set, err := settings(dial, a.String(), timeout)
		if err != nil {
			err = tlsHint(a.String(), dial, useTLS, timeout, err)
			if !partial || !noAnswer(err) {
				return 0, nil, err
			}
			down = append(down, UnansweredServer{Addr: a.String(), Err: err})
			first = cmp.Or(first, err)
			continue
		}
		if !set.casEnabled {
			return 0, nil, fmt.Errorf("memcached: server %s runs with compare-and-swap disabled (-C): the token bucket, GCRA, shaper, smooth, sliding log and concurrency algorithms keep their state with gets/cas; restart it without -C", a)
		}
		if set.itemSizeMax > 0 {
			maxItemSize = min(maxItemSize, set.itemSizeMax)
		}
	}
	if len(down) == len(addrs) {
		return 0, nil, first
	}
	return maxItemSize, down, nil
}

// noAnswer reports whether err, an error of settings, says that the
// server did not answer (it could not be reached, closed or reset the
// connection, or let the timeout pass), which may pass by itself, rather
// than that it answered in a way the store cannot use.
func noAnswer(err error) bool {
	if errors.Is(err, ErrTLSMismatch) {
		return false // it answered, in or out of TLS
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED)
}

// UnansweredServer is a server of the ring that did not answer Open's
// check under WithPartialStart (see Store.Unanswered).
type UnansweredServer struct {
	// Addr is the server as the URL writes it (host:port).
	Addr string
	// Err is why: an error wrapping store.ErrUnavailable that names the
	// server.
	Err error
}

// settings reads a server's "stats settings". A server that does not
// answer it (a proxy: twemproxy closes the connection, others answer an
// error) is checked by "version" instead, as before Open read settings, and
// its settings are taken as the defaults: compare-and-swap on (a -C server
// behind it is then found by the first decision, see load) and the item
// size limit unknown.
func settings(dial dialFunc, addr string, timeout time.Duration) (serverSettings, error) {
	set := serverSettings{casEnabled: true}
	conn, err := dialTimeout(dial, addr, timeout)
	if err != nil {
		return set, fmt.Errorf("%w: memcached: server %s: %w", store.ErrUnavailable, addr, err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write([]byte("stats settings\r\n")); err != nil {
		return set, fmt.Errorf("%w: memcached: server %s: %w", store.ErrUnavailable, addr, err)
	}
	r := bufio.NewReader(conn)
	for first := true; ; first = false {
		line, err := r.ReadString('\n')
		if first && errors.Is(err, io.EOF) {
			// twemproxy closes the connection on a command it does not
			// forward.
			return set, version(dial, addr, timeout)
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				err = fmt.Errorf("no answer to the text protocol within %v (a server started with -B binary, or with SASL, -S, speaks only the binary protocol, which this store does not): %w", timeout, err)
			}
			return set, fmt.Errorf("%w: memcached: server %s: %w", store.ErrUnavailable, addr, err)
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "END" {
			return set, nil
		}
		if first && (line == "ERROR" || strings.HasPrefix(line, "CLIENT_ERROR") || strings.HasPrefix(line, "SERVER_ERROR")) {
			// A proxy that does not forward stats settings.
			return set, version(dial, addr, timeout)
		}
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "STAT" {
			if first {
				if hint := notMemcachedHint(line); hint != "" {
					return set, fmt.Errorf("%w: memcached: server %s: unexpected answer to stats settings%s", store.ErrUnavailable, addr, hint)
				}
			}
			return set, fmt.Errorf("%w: memcached: server %s: unexpected answer to stats settings: %q", store.ErrUnavailable, addr, line)
		}
		switch f[1] {
		case "cas_enabled":
			set.casEnabled = f[2] != "no"
		case "item_size_max":
			set.itemSizeMax, _ = strconv.Atoi(f[2])
		}
	}
}

// dialFunc is the store's dial (dialNet).
type dialFunc = func(ctx context.Context, network, address string) (net.Conn, error)

// dialTimeout dials addr with dial within timeout.
func dialTimeout(dial dialFunc, addr string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return dial(ctx, "tcp", addr)
}

// version checks that addr answers "version" with VERSION.
func version(dial dialFunc, addr string, timeout time.Duration) error {
	conn, err := dialTimeout(dial, addr, timeout)
	if err != nil {
		return fmt.Errorf("%w: memcached: server %s: %w", store.ErrUnavailable, addr, err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write([]byte("version\r\n")); err != nil {
		return fmt.Errorf("%w: memcached: server %s: %w", store.ErrUnavailable, addr, err)
	}
	// Bounded: a server that is not memcached (one speaking TLS) may send
	// bytes with no newline.
	line, err := bufio.NewReaderSize(io.LimitReader(conn, 256), 256).ReadString('\n')
	if err != nil {
		return fmt.Errorf("%w: memcached: server %s: no answer to stats settings or version: %w", store.ErrUnavailable, addr, err)
	}
	if !strings.HasPrefix(line, "VERSION ") {
		return fmt.Errorf("%w: memcached: server %s: unexpected answer to version: %q", store.ErrUnavailable, addr, strings.TrimRight(line, "\r\n"))
	}
	return nil
}

// respTypes are the first bytes of the replies of Redis's protocol (RESP2
// and RESP3), none of which starts a line of memcached's.
const respTypes = "-+:$*_,#!=(%~>|"

// notMemcachedHint says, for line, a server's first line in answer to
// stats settings that is not memcached's, what the server seems to be
// (" (…)", quoting the line), or "" when the line does not tell. A Redis
// answers a command it does not know with an error (redis-server 7: "-ERR
// unknown command 'stats', with args beginning with: 'settings' "); an
// HTTP server with a status line (400 Bad Request). The words are those
// of the converse hint the redis package gives a redis:// URL that
// reaches a memcached.
func notMemcachedHint(line string) string {
	switch {
	case line != "" && strings.IndexByte(respTypes, line[0]) >= 0:
		return " (is it a Redis server? its reply " + store.QuoteReply(line) + " is Redis's protocol, not memcached's; redis:// is the URL of a Redis server)"
	case strings.HasPrefix(line, "HTTP/"):
		return " (is it an HTTP server? its reply " + store.QuoteReply(line) + " is HTTP, not memcached's protocol)"
	}
	return ""
}
