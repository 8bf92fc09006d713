// Package storeurl opens a store.Store from a store URL, the form the
// floodgate server's --store flag takes:
//
//	memory://[?max_keys=N&shards=N]                 the embedded store (default)
//	redis://[user:pass@]host:port[/db]              standalone Redis
//	rediss://[user:pass@]host:port[/db]             standalone Redis over TLS
//	redis-cluster://host:port,host:port,...         Redis Cluster (seed nodes)
//	redis-sentinel://master@host:port,host:port     Redis through Sentinel
//	memcached://host:port[,host:port]               one or several memcached servers
//
// Every problem with a URL is a *URLError wrapping ErrBadURL that quotes
// the URL once (with any password hidden) and says what is wrong; a store
// that cannot be reached is an error wrapping store.ErrUnavailable.
package storeurl
