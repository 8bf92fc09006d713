package redis

import (
	"strings"
	"testing"
)

// TestParseURLEscapedDuplicate: a parameter given twice, once with its
// name percent-escaped, is refused as given twice, not read as the last.
func TestParseURLEscapedDuplicate(t *testing.T) {
	for _, raw := range []string{
		"redis://h:1?wait_replicas=1&wait%5Freplicas=2",
		"redis://h:1?wait%5freplicas=2&wait_replicas=1",
		"redis://h:1?wait_replicas=1&wait_timeout=20ms&wait_%74imeout=30ms",
	} {
		e, err := ParseURL(raw)
		if err == nil || !strings.Contains(err.Error(), "given 2 times") {
			t.Errorf("ParseURL(%q) = %+v, %v; want an error naming the parameter given 2 times", raw, e, err)
		}
	}
}
