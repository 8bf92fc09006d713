package server

import (
	"bytes"
	"log/slog"
	"testing"
)

// net/http's messages are logged at DEBUG for a failed TLS handshake, at
// WARN for the rest.
func TestHTTPErrorLogLevels(t *testing.T) {
	for _, c := range []struct{ msg, want string }{
		{"http: TLS handshake error from 127.0.0.1:5000: tls: client didn't provide a certificate\n",
			`level=DEBUG msg="http: TLS handshake error from 127.0.0.1:5000: tls: client didn't provide a certificate" listener=http` + "\n"},
		{"http: Accept error: too many open files; retrying in 5ms\n",
			`level=WARN msg="http: Accept error: too many open files; retrying in 5ms" listener=http` + "\n"},
		{"http: panic serving 127.0.0.1:5000: boom\ngoroutine 1 [running]:\n",
			`level=WARN msg="http: panic serving 127.0.0.1:5000: boom\ngoroutine 1 [running]:" listener=http` + "\n"},
	} {
		var buf bytes.Buffer
		s := &Server{log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug,
			ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			}}))}
		s.httpErrorLog("http").Print(c.msg)
		if buf.String() != c.want {
			t.Errorf("%q logged as %q, want %q", c.msg, buf.String(), c.want)
		}
	}
}
