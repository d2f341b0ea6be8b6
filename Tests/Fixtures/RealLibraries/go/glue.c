// The C side of the Go c-shared plugin: sp_plugin_create with the header's exact prototype (cgo's
// //export would declare it without `const`), the static sp_plugin, and the receive trampoline.
#include "glue.h"

static const sp_host *g_host;

extern void goReceive(uint8_t *json, size_t len);

static void receive_trampoline(void *ctx, const uint8_t *json, size_t len) {
    (void)ctx;
    goReceive((uint8_t *)json, len);
}

static const sp_plugin g_plugin = { SP_ABI_VERSION, 0, receive_trampoline, 0 };

const sp_plugin *sp_plugin_create(const sp_host *host) {
    g_host = host;
    return &g_plugin;
}

int glue_send(const uint8_t *json, size_t len) { return g_host->send(g_host->ctx, json, len); }
