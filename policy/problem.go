package policy

import (
	"fmt"
	"sort"
	"strings"

	"github.com/floodgate/floodgate/internal/names"
)

// Problem is one thing wrong with a configuration: where and what.
type Problem struct {
	// File is the configuration file's path as given to Load.
	File string
	// Line is 1-based; 0 when the problem concerns the whole file (it
	// could not be read).
	Line int
	// Message says what is wrong and, where it helps, what would be right.
	Message string
}

// String returns "file:line: message" ("file: message" when Line is 0).
func (p Problem) String() string {
	if p.Line <= 0 {
		return p.File + ": " + p.Message
	}
	return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Message)
}

// Problems is every problem found in a configuration, sorted by file and
// line. It is the error Load and Parse return for an invalid configuration.
type Problems []Problem

// Error returns one problem per line.
func (ps Problems) Error() string {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p.String())
	}
	return b.String()
}

func (ps Problems) sort() {
	sort.SliceStable(ps, func(i, j int) bool {
		if ps[i].File != ps[j].File {
			return ps[i].File < ps[j].File
		}
		return ps[i].Line < ps[j].Line
	})
}

// suggest returns ` (did you mean "x"?)` for the known name closest to s,
// when one is close enough to be a likely typo.
func suggest(s string, known []string) string {
	best := closest(s, known)
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// closest returns the known name s is most likely a typo of, or "".
func closest(s string, known []string) string {
	best, bestD := "", len(s)/3+2
	for _, k := range known {
		if d := names.EditDistance(s, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}
