//go:build race

package gateway_test

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// allocation counts do not hold under it.
const raceEnabled = true
