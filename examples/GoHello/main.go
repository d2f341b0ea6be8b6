// A plugin in Go: a c-shared library whose sp_plugin_create (in glue.c) is built against the C
// header SDK/Sources/CPluginABI/include/sp_plugin.h (docs/languages.md):
//
//	go build -buildmode=c-shared -o libgohello.so .
//
// Methods: "hello" → "Hello from Go!"; "add" with params [a, b] → a + b. Every event is answered
// with null. The Go runtime starts its threads when the worker loads the library, after the
// sandbox is on.
package main

/*
#cgo CFLAGS: -I${SRCDIR}/../../SDK/Sources/CPluginABI/include
int glue_send(const char *json, int len);
*/
import "C"

import (
	"encoding/json"
	"fmt"
	"unsafe"
)

func main() {}

// message holds what this plugin reads of a request (encoding/json: the Go way).
type message struct {
	Type   string          `json:"type"`
	ID     uint64          `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

func send(text string) {
	b := []byte(text)
	C.glue_send((*C.char)(unsafe.Pointer(&b[0])), C.int(len(b)))
}

func reply(id uint64, member, value string) {
	send(fmt.Sprintf(`{"type":"reply","id":%d,"%s":%s}`, id, member, value))
}

//export goReceive
func goReceive(data *C.char, length C.int) {
	var m message
	if json.Unmarshal(C.GoBytes(unsafe.Pointer(data), length), &m) != nil {
		return
	}
	switch {
	case m.Type == "event":
		reply(m.ID, "result", "null")
	case m.Type == "call" && m.Method == "hello":
		reply(m.ID, "result", `"Hello from Go!"`)
	case m.Type == "call" && m.Method == "add":
		var ab []int64
		if json.Unmarshal(m.Params, &ab) != nil || len(ab) != 2 {
			reply(m.ID, "error", `{"code":"badRequest","message":"add takes [a, b]"}`)
			return
		}
		reply(m.ID, "result", fmt.Sprint(ab[0]+ab[1]))
	case m.Type == "call" || m.Type == "open":
		reply(m.ID, "error", `{"code":"notFound","message":"no such method; try hello or add"}`)
	}
}
