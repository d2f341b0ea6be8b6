// The go-plugin peer of the comparison (scripts/compare-goplugin.sh): a plugin served by HashiCorp
// go-plugin 1.0.1 (Debian's golang-github-hashicorp-go-plugin-dev) over net/rpc on a Unix socket,
// with one trivial method, as bench.callee's `ping` is in supervisor-bench.
package main

import (
	"net/rpc"

	plugin "github.com/hashicorp/go-plugin"
)

// Echo is what the host calls: Plugin.Ping answers 1.
type Echo struct{}

// Ping answers 1, like TestKit's ping.
func (Echo) Ping(_ int, reply *int) error {
	*reply = 1
	return nil
}

// EchoPlugin serves Echo over net/rpc.
type EchoPlugin struct{}

func (EchoPlugin) Server(*plugin.MuxBroker) (interface{}, error) { return &Echo{}, nil }
func (EchoPlugin) Client(_ *plugin.MuxBroker, c *rpc.Client) (interface{}, error) {
	return c, nil
}

func main() {
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: plugin.HandshakeConfig{ProtocolVersion: 1, MagicCookieKey: "SP_BENCH", MagicCookieValue: "go-plugin"},
		Plugins:         map[string]plugin.Plugin{"echo": EchoPlugin{}},
	})
}
