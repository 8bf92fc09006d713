package policy

import (
	"errors"
	"strings"
	"testing"
)

// AddConfigCheck's checks run in order on every SetConfig; their errors
// are joined, the configuration in force stays (and keeps its version);
// remove unregisters one check and only it; a nil check is ignored.
func TestAddConfigCheck(t *testing.T) {
	e := newMemEngine(t, mustParse(t, "domain: a\n"), nil)
	before, v := e.Config(), e.Version()
	var seen []string
	errB := errors.New("no domain b")
	check := func(name string, fail error) func(*Config) error {
		return func(c *Config) error {
			seen = append(seen, name)
			if c.Domain("b") == nil {
				return fail
			}
			return nil
		}
	}
	removeFirst := e.AddConfigCheck(check("first", errB))
	e.AddConfigCheck(check("second", errors.New("still no domain b")))
	e.AddConfigCheck(nil)()

	err := e.SetConfig(mustParse(t, "domain: c\n"))
	if err == nil || !errors.Is(err, errB) || !strings.Contains(err.Error(), "still no domain b") ||
		!strings.HasPrefix(err.Error(), "policy: configuration not installed, the one in force stays: ") {
		t.Fatalf("SetConfig = %v, want both checks' errors under the refusal", err)
	}
	if got := strings.Join(seen, ","); got != "first,second" {
		t.Errorf("checks ran %q, want first,second", got)
	}
	if e.Config() != before || e.Version() != v {
		t.Fatalf("a refused configuration was installed (version %d → %d)", v, e.Version())
	}

	removeFirst()
	seen = nil
	err = e.SetConfig(mustParse(t, "domain: c\n"))
	if err == nil || errors.Is(err, errB) || strings.Join(seen, ",") != "second" {
		t.Fatalf("after removing the first: SetConfig = %v, checks ran %v; want only the second's error", err, seen)
	}
	if err := e.SetConfig(mustParse(t, "domain: b\n")); err != nil {
		t.Fatalf("SetConfig of a configuration every check accepts = %v", err)
	}
	if e.Config().Domain("b") == nil || e.Version() != v+1 {
		t.Fatalf("accepted configuration not installed (version %d, want %d)", e.Version(), v+1)
	}
}
