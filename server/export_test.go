package server

import "time"

// SetGRPCPingMinTime sets the ping interval the gRPC servers New builds
// from now on tolerate, and returns what restores it.
func SetGRPCPingMinTime(d time.Duration) (restore func()) {
	old := grpcPingMinTime
	grpcPingMinTime = d
	return func() { grpcPingMinTime = old }
}

// SetGRPCConnectionTimeout sets the handshake bound of the gRPC servers
// New builds from now on, and returns what restores it.
func SetGRPCConnectionTimeout(d time.Duration) (restore func()) {
	old := grpcConnectionTimeout
	grpcConnectionTimeout = d
	return func() { grpcConnectionTimeout = old }
}

// SetNow sets the clock of s's decision log.
func SetNow(s *Server, now func() time.Time) { s.now = now }
