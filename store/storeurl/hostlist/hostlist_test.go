package hostlist

import (
	"slices"
	"strings"
	"testing"
)

// FuzzParse: no input panics, and an accepted list is canonical after one
// reading: its addresses, listed again (an IPv6 zone written back as a URL
// writes it, '%' as "%25"), read back the same.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"h:1", "h", "[::1]", "[::1]:07000,b:2", "a:+1", "a,,b", "::1", "[fe80::1%25eth0]:1", "[fe80::1%eth0]", "[::1", "A:1,a:01", " h:1"} {
		f.Add(s, "11211")
		f.Add(s, "")
	}
	f.Fuzz(func(t *testing.T, list, defaultPort string) {
		if _, ok := parsePort(defaultPort); !ok {
			defaultPort = ""
		}
		addrs, err := Parse(list, "server", defaultPort)
		if err != nil {
			return
		}
		if len(addrs) == 0 {
			t.Fatalf("Parse(%q) = no address and no error", list)
		}
		relist := slices.Clone(addrs)
		for i, a := range relist {
			if strings.HasPrefix(a, "[") {
				relist[i] = strings.ReplaceAll(a, "%", "%25")
			}
		}
		again, err := Parse(strings.Join(relist, ","), "server", "")
		if err != nil || !slices.Equal(again, addrs) {
			t.Fatalf("Parse(%q) = %q, which reads back as %q, %v", list, addrs, again, err)
		}
	})
}
