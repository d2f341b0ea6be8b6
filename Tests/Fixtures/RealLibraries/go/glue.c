// The C side of the Go c-shared plugin: the ABI's structs and the receive trampoline (a cgo file
// with //export may only declare, so the definitions live here).
#include "glue.h"

static const sp_host *g_host;

extern void goReceive(uint8_t *json, size_t len);

static void receive_trampoline(void *ctx, const uint8_t *json, size_t len) {
    (void)ctx;
    goReceive((uint8_t *)json, len);
}

static sp_plugin g_plugin = { 1, 0, receive_trampoline, 0 };

void glue_set_host(const sp_host *host) { g_host = host; }
const sp_plugin *glue_plugin(void) { return &g_plugin; }
int glue_send(const uint8_t *json, size_t len) { return g_host->send(g_host->ctx, json, len); }
