package memory_test

import (
	"testing"

	"github.com/floodgate/floodgate/store/memory"
)

// TestDefaultMaxKeys: memory.New caps the keys at a million by default, as
// a memory:// URL does, so that a library user keyed by user or IP does
// not get an unbounded store; WithMaxKeys(0) still removes the cap.
func TestDefaultMaxKeys(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []memory.Option
		want int64
	}{
		{"default", nil, 1_000_000},
		{"no cap", []memory.Option{memory.WithMaxKeys(0)}, 0},
		{"set", []memory.Option{memory.WithMaxKeys(500)}, 500},
	} {
		st, err := memory.New(append(tc.opts, memory.WithSweepInterval(0))...)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Stats().MaxKeys; got != tc.want {
			t.Errorf("%s: MaxKeys = %d, want %d", tc.name, got, tc.want)
		}
		_ = st.Close()
	}
}
