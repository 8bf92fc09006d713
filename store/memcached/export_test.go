package memcached

// StateKey and FixedKey expose the memcached key names to the external
// tests, which read items' TTLs with memcached's meta commands.
func StateKey(s *Store, key string) string { return s.keys.state(key) }

func FixedKey(s *Store, key string, start int64) string { return s.keys.fixed(key, start) }

func SlidingKey(s *Store, key string, sub, idx int64) string {
	return s.keys.sliding(key, sub, idx, 0)[0]
}
