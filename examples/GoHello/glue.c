// The C side of the Go plugin: sp_plugin_create itself (with the header's exact prototype), the
// static sp_plugin, and the call through host->send, which cgo cannot make from Go.
#include "sp_plugin.h"
#include "_cgo_export.h"

static const sp_host *host;

static void receive(void *ctx, const uint8_t *json, size_t len) {
    (void)ctx;
    goReceive((char *)json, (int)len);
}

static void destroy(void *ctx) { (void)ctx; }

static const sp_plugin plugin = { SP_ABI_VERSION, NULL, receive, destroy };

const sp_plugin *sp_plugin_create(const sp_host *h) {
    if (h == NULL || h->abi_version != SP_ABI_VERSION) return NULL;
    host = h;
    return &plugin;
}

int glue_send(const char *json, int len) { return host->send(host->ctx, (const uint8_t *)json, (size_t)len); }
