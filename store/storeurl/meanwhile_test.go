package storeurl_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/store/storeurl"
)

// WithMeanwhile says in OpenRetrying's WARN what answers while the store
// is not open, in place of the failure policy (a peer region's store: its
// region limits on its share).
func TestWithMeanwhile(t *testing.T) {
	const addr = "127.0.0.1:1" // nothing listens there
	for _, c := range []struct {
		opt  storeurl.Option
		want string
	}{
		{nil, "retrying in the background; the failure policy answers meanwhile"},
		{storeurl.WithMeanwhile("this region limits on its share meanwhile"), "retrying in the background; this region limits on its share meanwhile"},
	} {
		logs := new(syncBuffer)
		st, err := storeurl.OpenRetrying("redis://"+addr, storeurl.WithTimeout(time.Second), storeurl.WithRetryBackoff(time.Hour, time.Hour), c.opt,
			storeurl.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
		if err != nil {
			t.Fatal(err)
		}
		st.Close()
		if l := logs.String(); !strings.Contains(l, c.want) {
			t.Errorf("WARN: %s; want %q", l, c.want)
		}
	}
}
