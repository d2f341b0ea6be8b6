// The go-plugin peer of the stream comparison (scripts/compare-goplugin.sh, supervisor-bench's
// streams section): a plugin served by HashiCorp go-plugin 1.0.1 over gRPC, with one server-stream
// method, bench.Stream/Blobs, answering a count with that many messages of `size` bytes (a
// google.protobuf.BytesValue each), as TestKit's `blob` stream does for this project. No protoc:
// the service is described by hand (grpc.ServiceDesc) over the well-known wrapper messages.
package main

import (
	"context"

	"github.com/golang/protobuf/ptypes/wrappers"
	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
)

// blobs streams Int64Value.Value messages of Int64Value's size (request: count << 32 | size).
func blobs(_ interface{}, stream grpc.ServerStream) error {
	var request wrappers.Int64Value
	if err := stream.RecvMsg(&request); err != nil {
		return err
	}
	count, size := request.Value>>32, request.Value&0xffffffff
	chunk := &wrappers.BytesValue{Value: make([]byte, size)}
	for i := range chunk.Value {
		chunk.Value[i] = 'x'
	}
	for i := int64(0); i < count; i++ {
		if err := stream.SendMsg(chunk); err != nil {
			return err
		}
	}
	return nil
}

// ServiceDesc is bench.Stream, shared with the host (which calls it with grpc.ClientConn.NewStream).
var serviceDesc = grpc.ServiceDesc{
	ServiceName: "bench.Stream",
	HandlerType: (*interface{})(nil),
	Streams:     []grpc.StreamDesc{{StreamName: "Blobs", Handler: blobs, ServerStreams: true}},
	Metadata:    "bench.proto",
}

type streamPlugin struct{ plugin.Plugin }

func (streamPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	s.RegisterService(&serviceDesc, struct{}{})
	return nil
}

func (streamPlugin) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (interface{}, error) {
	return nil, nil
}

func main() {
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: plugin.HandshakeConfig{ProtocolVersion: 1, MagicCookieKey: "SP_BENCH", MagicCookieValue: "go-plugin"},
		Plugins:         map[string]plugin.Plugin{"stream": streamPlugin{}},
		GRPCServer:      plugin.DefaultGRPCServer,
	})
}
