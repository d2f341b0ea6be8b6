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

// blob answers one message of Int64Value.Value bytes (TestKit's `bytes` for this project).
func blob(_ interface{}, ctx context.Context, decode func(interface{}) error, _ grpc.UnaryServerInterceptor) (interface{}, error) {
	var request wrappers.Int64Value
	if err := decode(&request); err != nil {
		return nil, err
	}
	out := &wrappers.BytesValue{Value: make([]byte, request.Value)}
	for i := range out.Value {
		out.Value[i] = 7
	}
	return out, nil
}

// ServiceDesc is bench.Stream, shared with the host (which calls it with grpc.ClientConn.NewStream
// and Invoke).
var serviceDesc = grpc.ServiceDesc{
	ServiceName: "bench.Stream",
	HandlerType: (*interface{})(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Blob", Handler: blob}},
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
		// The send limit raised for bench.Stream/Blob's 256 MiB answer (gRPC's default is max int
		// to send, 4 MiB to receive: the host raises its own).
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			return plugin.DefaultGRPCServer(append(opts, grpc.MaxSendMsgSize(1<<30), grpc.MaxRecvMsgSize(1<<30)))
		},
	})
}
