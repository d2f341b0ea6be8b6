// A Go c-shared plugin (built by the tests with Debian's golang-go): what the Go runtime does
// routinely must work in the sandbox. Each method answers "ok" or a pluginError.
//   goroutines  a thousand goroutines and a WaitGroup
//   timers      time.Sleep, a Ticker, time.AfterFunc
//   profile     runtime/pprof's CPU profiler over busy work: it must get samples (SIGPROF from
//               setitimer/timer_create: with those denied it silently gets none)
//   tempfile    os.CreateTemp (TMPDIR)
//   gc          allocation and runtime.GC
//   numcpu      runtime.NumCPU (sched_getaffinity)
package main

// #cgo CFLAGS: -I${SRCDIR}/../../../../SDK/Sources/CPluginABI/include
// #include "glue.h"
import "C"

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"time"
	"unsafe"
)

func main() {}

func send(text string) {
	b := []byte(text)
	C.glue_send((*C.uint8_t)(unsafe.Pointer(&b[0])), C.size_t(len(b)))
}

func field(json, key string) string {
	i := strings.Index(json, `"`+key+`":`)
	if i < 0 {
		return ""
	}
	rest := strings.TrimSpace(json[i+len(key)+3:])
	if strings.HasPrefix(rest, `"`) {
		end := strings.Index(rest[1:], `"`)
		if end < 0 {
			return ""
		}
		return rest[1 : end+1]
	}
	end := strings.IndexAny(rest, ",}")
	if end < 0 {
		end = len(rest)
	}
	return strings.TrimSpace(rest[:end])
}

//export goReceive
func goReceive(bytesPtr *C.uint8_t, length C.size_t) {
	json := C.GoStringN((*C.char)(unsafe.Pointer(bytesPtr)), C.int(length))
	id := field(json, "id")
	if id == "" {
		id = "0"
	}
	if field(json, "type") != "call" {
		send(`{"type":"reply","id":` + id + `,"result":null}`)
		return
	}
	method := field(json, "method")
	if err := run(method); err != nil {
		msg := strings.ReplaceAll(err.Error(), `"`, `'`)
		send(`{"type":"reply","id":` + id + `,"error":{"code":"pluginError","message":"` + method + `: ` + msg + `"}}`)
		return
	}
	send(`{"type":"reply","id":` + id + `,"result":"ok"}`)
}

func run(method string) error {
	switch method {
	case "goroutines":
		var wg sync.WaitGroup
		var mu sync.Mutex
		sum := 0
		for i := 0; i < 1000; i++ {
			wg.Add(1)
			go func(n int) {
				defer wg.Done()
				mu.Lock()
				sum += n
				mu.Unlock()
			}(i)
		}
		wg.Wait()
		if sum != 499500 {
			return fmt.Errorf("sum %d", sum)
		}
	case "timers":
		t0 := time.Now()
		time.Sleep(10 * time.Millisecond)
		ticker := time.NewTicker(5 * time.Millisecond)
		for i := 0; i < 3; i++ {
			<-ticker.C
		}
		ticker.Stop()
		done := make(chan struct{})
		time.AfterFunc(5*time.Millisecond, func() { close(done) })
		<-done
		if time.Since(t0) < 25*time.Millisecond {
			return fmt.Errorf("timers fired early")
		}
	case "profile":
		var buf bytes.Buffer
		if err := pprof.StartCPUProfile(&buf); err != nil {
			return err
		}
		deadline := time.Now().Add(400 * time.Millisecond)
		x := 0
		for time.Now().Before(deadline) {
			for i := 0; i < 100000; i++ {
				x += i * i
			}
		}
		pprof.StopCPUProfile()
		n, err := samples(buf.Bytes())
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("the CPU profile holds no sample (busy for 400 ms; x=%d)", x)
		}
	case "tempfile":
		f, err := os.CreateTemp("", "go-plugin-*")
		if err != nil {
			return err
		}
		defer os.Remove(f.Name())
		if _, err := f.WriteString("hello"); err != nil {
			return err
		}
		f.Close()
	case "gc":
		keep := make([][]byte, 0, 64)
		for i := 0; i < 64; i++ {
			keep = append(keep, make([]byte, 1<<20))
		}
		runtime.GC()
		if len(keep) != 64 {
			return fmt.Errorf("lost allocations")
		}
	case "numcpu":
		if runtime.NumCPU() < 1 {
			return fmt.Errorf("NumCPU %d", runtime.NumCPU())
		}
	default:
		return fmt.Errorf("no method %s", method)
	}
	return nil
}

// samples counts the `sample` entries (field 2) of a gzipped profile.proto.
func samples(gz []byte) (int, error) {
	r, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return 0, err
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return 0, err
	}
	varint := func(i int) (uint64, int) {
		var v uint64
		for shift := 0; i < len(data); shift += 7 {
			b := data[i]
			i++
			v |= uint64(b&0x7f) << shift
			if b < 0x80 {
				return v, i
			}
		}
		return v, -1
	}
	count := 0
	for i := 0; i < len(data); {
		key, next := varint(i)
		if next < 0 {
			return 0, fmt.Errorf("bad profile")
		}
		i = next
		switch key & 7 {
		case 0:
			_, i = varint(i)
		case 1:
			i += 8
		case 2:
			l, next := varint(i)
			i = next + int(l)
			if key>>3 == 2 {
				count++
			}
		case 5:
			i += 4
		default:
			return 0, fmt.Errorf("bad wire type %d", key&7)
		}
		if i < 0 {
			return 0, fmt.Errorf("bad profile")
		}
	}
	return count, nil
}
