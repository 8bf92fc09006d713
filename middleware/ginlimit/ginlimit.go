// Package ginlimit adapts Floodgate's HTTP middleware to gin: the same
// descriptors, decisions, header fields and strategies as package
// middleware, as a gin.HandlerFunc. It lives in its own package so that
// the core never imports gin.
//
//	limit, err := middleware.New(engine, "api", extractor)
//	router.Use(ginlimit.New(limit))
//
// Without a rules file, ForLimiter limits by one limiter.Limiter and a
// key (middleware.ForLimiter):
//
//	lim, err := limiter.New(st, "per-ip", algo.Params{Algorithm: algo.TokenBucket, Limit: 100, Period: time.Minute})
//	limit, err := ginlimit.ForLimiter(lim, middleware.ClientIPKey())
//	router.Use(limit)
//
// A request the middleware answers itself — refused (429, or
// WithRefuseStatus's 503, with a problem body), served by the degrade
// fallback, or failed (400, 500, or 503 when the store cannot decide) —
// has the chain aborted; an admitted one (or one WithFailOpen lets pass)
// continues with the fields set, and its concurrency slots are held,
// their leases renewed, until the chain returns, also when it panics. Functions that read the request (dimension.WithUser,
// middleware.WithCost, ...) can reach the gin.Context with [Context], e.g.
// to read what an authentication handler stored with c.Set.
//
// The client address a remote_address descriptor uses is Floodgate's own
// (dimension.Spec's TrustedProxies, nobody trusted by default), not gin's
// c.ClientIP(), which trusts every proxy's X-Forwarded-For until
// router.SetTrustedProxies is called. Give both the same proxies, or the
// address a log line shows may not be the one the request was limited by.
package ginlimit

import (
	"context"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/middleware"
)

type ctxKey struct{}

// New returns a gin handler that limits requests with m. A nil m, or a
// zero middleware.Middleware{} (not made by middleware.New or
// middleware.ForLimiter), is a programming error that New reports at
// once, as net/http's Handle does a nil handler: it panics saying which,
// rather than the first request with a nil dereference (gin's handler
// type leaves no error to return).
func New(m *middleware.Middleware) gin.HandlerFunc {
	if m == nil {
		panic("ginlimit: New: nil *middleware.Middleware (check the error of middleware.New or middleware.ForLimiter)")
	}
	// Handler refuses a zero Middleware{} now, with Check's message;
	// Check itself could tell only at the first request.
	m.Handler(http.NotFoundHandler())
	return func(c *gin.Context) {
		r := c.Request.WithContext(context.WithValue(c.Request.Context(), ctxKey{}, c))
		done, pass := m.Check(c.Writer, r)
		if !pass {
			c.Abort()
			return
		}
		defer done()
		c.Next()
	}
}

// ForLimiter returns a gin handler that limits each request by one
// decision of lim on its key: New(middleware.ForLimiter(lim, key,
// opts...)), with ForLimiter's behaviour, options and errors. The
// client address of middleware.ClientIPKey is Floodgate's, with its own
// trusted proxies, not gin's c.ClientIP() (see the package doc); a
// middleware.KeyFunc can read the gin.Context through Context.
func ForLimiter(lim *limiter.Limiter, key middleware.Key, opts ...middleware.Option) (gin.HandlerFunc, error) {
	m, err := middleware.ForLimiter(lim, key, opts...)
	if err != nil {
		return nil, err
	}
	return New(m), nil
}

// Context returns the gin.Context of a request that New's handler is
// deciding, or nil for any other request.
func Context(r *http.Request) *gin.Context {
	c, _ := r.Context().Value(ctxKey{}).(*gin.Context)
	return c
}
