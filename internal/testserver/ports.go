package testserver

import (
	"errors"
	"net"
	"strconv"
	"sync"
)

// clusterBusOffset is the offset of the Redis Cluster bus port from the client port.
const clusterBusOffset = 10000

var (
	portsMu sync.Mutex
	// handedOut holds every port this process already gave to a server, so that two servers
	// started concurrently by the same process never get the same port even if the kernel
	// hands it out twice between listen/close and the server's bind.
	handedOut = map[int]bool{}
)

// portFree reports whether 127.0.0.1:port can be listened on right now.
func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// freePort returns a port on 127.0.0.1 that was free a moment ago: listen on :0, take the
// port, close. With bus set, port+10000 (the Redis Cluster bus port) must also be free.
// The small race with other processes is handled by the callers, which retry with a new
// port when a server fails to bind.
func freePort(bus bool) (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 200 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if handedOut[port] {
			continue
		}
		if bus {
			if port+clusterBusOffset > 65535 || handedOut[port+clusterBusOffset] || !portFree(port+clusterBusOffset) {
				continue
			}
			handedOut[port+clusterBusOffset] = true
		}
		handedOut[port] = true
		return port, nil
	}
	return 0, errors.New("testserver: no free port found on 127.0.0.1")
}
