package server_test

import (
	"context"
	"io"
	"testing"

	"google.golang.org/grpc/codes"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/server"
)

// TestGRPCReflectionOff: WithGRPCReflection(false) (serve
// --grpc-reflection=false) withholds the reflection service, so a caller
// cannot list the services; the rate limit service still answers.
func TestGRPCReflectionOff(t *testing.T) {
	e := newEnv(t, server.WithGRPCReflection(false))
	stream, err := reflectionpb.NewServerReflectionClient(e.conn).ServerReflectionInfo(context.Background())
	if err == nil {
		// Send returns io.EOF when the server has already ended the
		// stream (with Unimplemented); the status is then Recv's.
		if err = stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err == nil || err == io.EOF {
			_, err = stream.Recv()
		}
	}
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("reflection with WithGRPCReflection(false): %v, want Unimplemented", err)
	}
	if _, err := e.rls.ShouldRateLimit(context.Background(), envoyReq("quota", 0, []string{"bucket", "b1"})); err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
}
