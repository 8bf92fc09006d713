// Package storeurl opens a store.Store from a store URL, the form the
// floodgate server's --store flag takes:
//
//	memory://[?max_keys=N&shards=N]                 the embedded store (default; max_keys 1000000, 0 for no cap)
//	redis://[user:pass@]host:port[/db]              standalone Redis
//	rediss://[user:pass@]host:port[/db]             standalone Redis over TLS
//	redis-cluster://host:port,host:port,...         Redis Cluster (seed nodes)
//	redis-sentinel://master@host:port,host:port     Redis through Sentinel
//	memcached://host:port[,host:port]               one or several memcached servers
//	memcacheds://host:port[,host:port]              the same over TLS
//
// Every problem with a URL is a *URLError wrapping ErrBadURL that quotes
// the URL once (with any password hidden) and says what is wrong; a store
// that cannot be reached is an error wrapping store.ErrUnavailable.
//
// Open connects to a remote store and checks it before it returns.
// OpenRetrying does the same, but when the store cannot be reached yet
// (Transient) it returns a *Retrying store that fails every call with
// ErrNotOpen (a store.ErrUnavailable, for a failure policy to answer)
// while a goroutine retries Open with backoff, then passes every call to
// the store it opened; Close stops the retries. A memcached ring opens
// under OpenRetrying once one of its servers answers, the others' keys
// failing until they answer (memcached.WithPartialStart).
package storeurl
