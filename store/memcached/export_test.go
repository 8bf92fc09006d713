package memcached

// StateKey and FixedKey expose the memcached key names to the external
// tests, which read items' TTLs with memcached's meta commands.
func StateKey(s *Store, key string) string { return s.keys.state(key) }

func FixedKey(s *Store, key string, start int64) string { return s.keys.fixed(key, start) }

func SlidingKey(s *Store, key string, sub, idx int64) string {
	return s.keys.sliding(key, sub, idx, 0)[0]
}

// WithoutServerCheck opens a store without reading the servers' settings,
// as a store opened before a server was restarted with other ones.
func WithoutServerCheck() Option {
	return func(c *config) error { c.skipCheck = true; return nil }
}

// RoundTrips returns the round trips begun to each server since Open (in
// the URL's order): every request of gomemcache's and every pipelined
// step, counted when its first byte is written on a connection.
func RoundTrips(s *Store) []int64 {
	out := make([]int64, len(s.trips))
	for i := range s.trips {
		out[i] = s.trips[i].Load()
	}
	return out
}
