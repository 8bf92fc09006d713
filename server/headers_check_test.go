package server_test

import (
	"strings"
	"testing"

	"github.com/floodgate/floodgate/headers"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/server"
	"github.com/floodgate/floodgate/store/memory"
)

// TestNewRefusesBadHeaderNames: server.New refuses WithHeaders names that
// are no header field names, or that name one field twice, as
// middleware.New does (headers.Options.Check); net/http would drop such
// fields silently. It accepted them.
func TestNewRefusesBadHeaderNames(t *testing.T) {
	st, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	eng, err := policy.NewEngine(nil, st)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		names headers.Names
		says  string
	}{
		{headers.Names{RateLimit: "Rate Limit"}, `"Rate Limit" is not a header field name`},
		{headers.Names{Remaining: "x-ratelimit-limit"}, "are one header field"},
	} {
		_, err := server.New(eng, st, server.WithHeaders(headers.Options{Names: c.names}))
		if err == nil || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), "WithHeaders") {
			t.Errorf("New with header names %+v: %v, want an error naming WithHeaders that says %q", c.names, err, c.says)
		}
	}
	if _, err := server.New(eng, st, server.WithHeaders(headers.Options{Names: headers.Names{RateLimit: "Quota"}})); err != nil {
		t.Errorf("New with a good renamed field: %v", err)
	}
}
