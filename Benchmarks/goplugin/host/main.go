// The go-plugin host of the comparison (scripts/compare-goplugin.sh): starts plugins with HashiCorp
// go-plugin 1.0.1 and measures what supervisor-bench measures for this project, printing JSON:
//
//	callP50Us, callP99Us   one call at a time to Plugin.Ping (one hop: host → plugin → host)
//	throughput64           calls per second with 64 in flight on one client
//	start1Ms, start50Ms    from launching 1 (50, in parallel) plugin processes to all answering
//	start50SequentialMs    50 started one after the other, as a host usually does
//	streamMBps             with -stream-plugin: a gRPC server stream of 64 KiB messages read by the host (MB/s)
//
// With -scale N it only starts N plugin processes in parallel (supervisor-bench --only scale):
//
//	scaleStartMs           from launching N to all answering
//	scalePssMiB            the plugin processes' proportional set size, median (MiB)
//	scaleHostRssMiB        the host's resident memory with N plugins (MiB)
//	scaleStopMs            killing all N and waiting for them
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/ioutil"
	"log"
	"net/rpc"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang/protobuf/ptypes/wrappers"
	hclog "github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
)

// The stream peer's plugin, over gRPC: the client side hands out the connection itself.
type streamPlugin struct{ plugin.Plugin }

func (streamPlugin) GRPCServer(*plugin.GRPCBroker, *grpc.Server) error {
	return fmt.Errorf("host only")
}
func (streamPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (interface{}, error) {
	return c, nil
}

var blobsDesc = grpc.StreamDesc{StreamName: "Blobs", ServerStreams: true}

// blobUs, once streamMBps has connected: n calls of bench.Stream/Blob answering size bytes, their
// durations sorted (µs). gRPC's receive limit (4 MiB by default) is raised for the call.
var blobUs func(size int64, n int) []float64

// The stream plugin's client, killed once every figure of it is taken.
var streamClient *plugin.Client

// streamMBps reads `count` messages of `size` bytes from the stream plugin's bench.Stream/Blobs,
// `rounds` times, and returns the median MB/s (10^6 bytes of payload a second).
func streamMBps(path string, count, size int64, rounds int) float64 {
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  handshake,
		Plugins:          map[string]plugin.Plugin{"stream": streamPlugin{}},
		Cmd:              exec.Command(path),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           hclog.New(&hclog.LoggerOptions{Output: ioutil.Discard, Level: hclog.Error}),
	})
	streamClient = client
	protocol, err := client.Client()
	if err != nil {
		log.Fatalf("starting %s: %v", path, err)
	}
	raw, err := protocol.Dispense("stream")
	if err != nil {
		log.Fatalf("dispense: %v", err)
	}
	conn := raw.(*grpc.ClientConn)
	read := func(n int64) {
		stream, err := conn.NewStream(context.Background(), &blobsDesc, "/bench.Stream/Blobs")
		if err != nil {
			log.Fatal(err)
		}
		if err := stream.SendMsg(&wrappers.Int64Value{Value: n<<32 | size}); err != nil {
			log.Fatal(err)
		}
		if err := stream.CloseSend(); err != nil {
			log.Fatal(err)
		}
		var got int64
		for {
			var m wrappers.BytesValue
			if err := stream.RecvMsg(&m); err == io.EOF {
				break
			} else if err != nil {
				log.Fatal(err)
			}
			got += int64(len(m.Value))
		}
		if got != n*size {
			log.Fatalf("read %d bytes, expected %d", got, n*size)
		}
	}
	blobUs = func(size int64, n int) []float64 {
		out := make([]float64, n)
		for i := range out {
			var m wrappers.BytesValue
			t := time.Now()
			if err := conn.Invoke(context.Background(), "/bench.Stream/Blob", &wrappers.Int64Value{Value: size}, &m,
				grpc.MaxCallRecvMsgSize(1<<30)); err != nil {
				log.Fatal(err)
			}
			out[i] = float64(time.Since(t).Nanoseconds()) / 1000
			if int64(len(m.Value)) != size {
				log.Fatalf("blob of %d bytes, expected %d", len(m.Value), size)
			}
		}
		sort.Float64s(out)
		return out
	}
	read(count / 10) // warm up
	rates := make([]float64, rounds)
	for i := range rates {
		began := time.Now()
		read(count)
		rates[i] = float64(count*size) / 1e6 / time.Since(began).Seconds()
	}
	sort.Float64s(rates)
	return rates[len(rates)/2]
}

type echoPlugin struct{}

func (echoPlugin) Server(*plugin.MuxBroker) (interface{}, error) { return nil, fmt.Errorf("host only") }
func (echoPlugin) Client(_ *plugin.MuxBroker, c *rpc.Client) (interface{}, error) {
	return c, nil
}

var handshake = plugin.HandshakeConfig{ProtocolVersion: 1, MagicCookieKey: "SP_BENCH", MagicCookieValue: "go-plugin"}

// start launches one plugin process and returns its client and RPC connection, once it answers.
func start(path string) (*plugin.Client, *rpc.Client) {
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig: handshake,
		Plugins:         map[string]plugin.Plugin{"echo": echoPlugin{}},
		Cmd:             exec.Command(path),
		Logger:          hclog.New(&hclog.LoggerOptions{Output: ioutil.Discard, Level: hclog.Error}),
	})
	protocol, err := client.Client()
	if err != nil {
		log.Fatalf("starting %s: %v", path, err)
	}
	raw, err := protocol.Dispense("echo")
	if err != nil {
		log.Fatalf("dispense: %v", err)
	}
	c := raw.(*rpc.Client)
	var one int
	if err := c.Call("Plugin.Ping", 0, &one); err != nil || one != 1 {
		log.Fatalf("first call: %v (%d)", err, one)
	}
	return client, c
}

// startAll launches n plugin processes in parallel and returns them once all answer, with the time it took (ms).
func startAll(path string, n int) ([]*plugin.Client, float64) {
	began := time.Now()
	clients := make([]*plugin.Client, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) { defer wg.Done(); clients[i], _ = start(path) }(i)
	}
	wg.Wait()
	return clients, float64(time.Since(began).Microseconds()) / 1000
}

func startMany(path string, n int) float64 {
	clients, ms := startAll(path, n)
	for _, c := range clients {
		c.Kill()
	}
	return ms
}

// kibField reads a "Name: N kB" line of a /proc file.
func kibField(path, name string) float64 {
	data, err := ioutil.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, name+":") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				v, _ := strconv.ParseFloat(f[1], 64)
				return v
			}
		}
	}
	return 0
}

// scale starts n plugins in parallel and reports their start, memory and stop.
func scale(path string, n int) map[string]float64 {
	out := map[string]float64{}
	clients, ms := startAll(path, n)
	out["scaleStartMs"] = ms
	var pss []float64
	for _, c := range clients {
		if rc := c.ReattachConfig(); rc != nil {
			pss = append(pss, kibField(fmt.Sprintf("/proc/%d/smaps_rollup", rc.Pid), "Pss")/1024)
		}
	}
	sort.Float64s(pss)
	if len(pss) > 0 {
		out["scalePssMiB"] = pss[len(pss)/2]
	}
	out["scaleHostRssMiB"] = kibField("/proc/self/status", "VmRSS") / 1024
	began := time.Now()
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func(c *plugin.Client) { defer wg.Done(); c.Kill() }(c)
	}
	wg.Wait()
	out["scaleStopMs"] = float64(time.Since(began).Microseconds()) / 1000
	return out
}

func main() {
	path := flag.String("plugin", "", "the plugin executable")
	scaleN := flag.Int("scale", 0, "only start this many plugins in parallel and report start, memory and stop")
	streamPath := flag.String("stream-plugin", "", "the gRPC stream plugin executable (streamMBps)")
	calls := flag.Int("calls", 20000, "calls for the latency and throughput figures")
	flag.Parse()
	if *path == "" {
		log.Fatal("-plugin is required")
	}
	if *scaleN > 0 {
		json.NewEncoder(os.Stdout).Encode(scale(*path, *scaleN))
		return
	}
	out := map[string]float64{}

	client, c := start(*path)
	var one int
	for i := 0; i < 500; i++ { // warm up
		_ = c.Call("Plugin.Ping", 0, &one)
	}
	lat := make([]float64, *calls)
	for i := range lat {
		t := time.Now()
		if err := c.Call("Plugin.Ping", 0, &one); err != nil {
			log.Fatal(err)
		}
		lat[i] = float64(time.Since(t).Nanoseconds()) / 1000
	}
	sort.Float64s(lat)
	out["callP50Us"] = lat[len(lat)/2]
	out["callP99Us"] = lat[len(lat)*99/100]

	total := *calls * 3
	var next int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	began := time.Now()
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r int
			for {
				mu.Lock()
				next++
				mine := next
				mu.Unlock()
				if mine > int64(total) {
					return
				}
				if err := c.Call("Plugin.Ping", 0, &r); err != nil {
					log.Fatal(err)
				}
			}
		}()
	}
	wg.Wait()
	out["throughput64"] = float64(total) / time.Since(began).Seconds()
	client.Kill()

	out["start1Ms"] = startMany(*path, 1)
	out["start50Ms"] = startMany(*path, 50)
	// As a host usually starts its plugins: one after the other (Client() blocks until the
	// handshake).
	began = time.Now()
	sequential := make([]*plugin.Client, 50)
	for i := range sequential {
		sequential[i], _ = start(*path)
	}
	out["start50SequentialMs"] = float64(time.Since(began).Microseconds()) / 1000
	for _, c := range sequential {
		c.Kill()
	}
	if *streamPath != "" {
		out["streamMBps"] = streamMBps(*streamPath, 4096, 64<<10, 5)
		for range blobUs(1<<20, 20) { // warm up
		}
		oneMiB := blobUs(1<<20, 300)
		out["blob1MiBP50Us"] = oneMiB[len(oneMiB)/2]
		out["blob256MiBMs"] = blobUs(256<<20, 1)[0] / 1000
		streamClient.Kill()
	}
	json.NewEncoder(os.Stdout).Encode(out)
}
