// Package causelog bounds how often a log repeats a line about the same
// cause: the store log of package server and the gateway's log of upstream
// failures both say a failure once per cause and interval, and how many
// were left out since, however often it happens.
package causelog

import "time"

// Limiter lets one line per cause through per Interval and counts the
// others. It remembers at most Max causes (at least one); beyond them,
// those reported longest ago are forgotten first, and their next line is
// let through. A Limiter is not safe for concurrent use: its callers hold
// their own lock. The zero value needs Interval and Max set.
type Limiter struct {
	Interval time.Duration
	Max      int
	causes   map[string]*cause
}

type cause struct {
	at      time.Time // when its last line was let through
	skipped int       // lines left out since
}

// Pass reports whether a line of key is due at now — none was let through
// within Interval — and, if so, how many were left out since the last one.
// A line not due is counted for the next.
func (l *Limiter) Pass(key string, now time.Time) (ok bool, skipped int) {
	c := l.causes[key]
	if c != nil && now.Sub(c.at) < l.Interval {
		c.skipped++
		return false, 0
	}
	if c == nil {
		if l.causes == nil {
			l.causes = map[string]*cause{}
		}
		for len(l.causes) >= max(l.Max, 1) {
			var oldest string
			for k, v := range l.causes {
				if oldest == "" || v.at.Before(l.causes[oldest].at) {
					oldest = k
				}
			}
			delete(l.causes, oldest)
		}
		c = &cause{}
		l.causes[key] = c
	}
	skipped, c.skipped, c.at = c.skipped, 0, now
	return true, skipped
}

// Skip counts a line of key left out for a reason of the caller's, for the
// next line of key to tell; a key never let through is not remembered.
func (l *Limiter) Skip(key string) {
	if c := l.causes[key]; c != nil {
		c.skipped++
	}
}

// Len is the number of causes remembered.
func (l *Limiter) Len() int { return len(l.causes) }
