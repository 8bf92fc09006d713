// Package testclock is a clock for tests that moves only when told to:
// algorithms' math is tested by moving time, never by sleeping.
package testclock

import (
	"sync"
	"time"
)

// Start is where New's clocks start: an instant of no significance, away
// from any window's edge of a minute or less.
var Start = time.Unix(1_700_000_000, 0)

// Clock is a clock that moves only when told to. It is safe for
// concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// New returns a clock at Start.
func New() *Clock { return &Clock{t: Start} }

// Now returns the clock's time; its method value is the clock option the
// stores take.
func (c *Clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

// Add moves the clock by d.
func (c *Clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }
