// Package ginlimit adapts Floodgate's HTTP middleware to gin: the same
// descriptors, decisions, header fields and strategies as package
// middleware, as a gin.HandlerFunc. It lives in its own package so that
// the core never imports gin.
//
//	limit, err := middleware.New(engine, "api", extractor)
//	router.Use(ginlimit.New(limit))
//
// A refused request is answered (429 with a problem body, or the degrade
// fallback) and the chain aborted; an admitted one continues with the
// fields set, and its concurrency slots are released when the chain
// returns. Functions that read the request (dimension.WithUser,
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

	"github.com/floodgate/floodgate/middleware"
)

type ctxKey struct{}

// New returns a gin handler that limits requests with m.
func New(m *middleware.Middleware) gin.HandlerFunc {
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

// Context returns the gin.Context of a request that New's handler is
// deciding, or nil for any other request.
func Context(r *http.Request) *gin.Context {
	c, _ := r.Context().Value(ctxKey{}).(*gin.Context)
	return c
}
