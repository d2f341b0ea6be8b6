/*
 * A plugin in plain C against sp_plugin.h, to prove the ABI needs nothing from Swift.
 * Build: cc -shared -fPIC -O2 -I Sources/CPluginABI/include -o libchello.so examples/CHello/chello.c
 *
 * Methods: "hello" → "hello from C"; "add" with params [a, b] → a + b; "pid" → the worker's pid.
 * It answers every event with a null result. The JSON handling is deliberately minimal (the
 * supervisor only ever sends well-formed messages); a real plugin would use a JSON library.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "sp_plugin.h"

static const sp_host *g_host;

/* Copies the string value of "key" into out (no escapes handled). Returns 1 if found. */
static int find_string(const char *json, size_t len, const char *key, char *out, size_t cap) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":\"", key);
    const char *p = memmem(json, len, pattern, strlen(pattern));
    if (!p) return 0;
    p += strlen(pattern);
    size_t i = 0;
    while (p < json + len && *p != '"' && i + 1 < cap) out[i++] = *p++;
    out[i] = 0;
    return 1;
}

static int find_uint(const char *json, size_t len, const char *key, unsigned long long *out) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":", key);
    const char *p = memmem(json, len, pattern, strlen(pattern));
    if (!p) return 0;
    *out = strtoull(p + strlen(pattern), NULL, 10);
    return 1;
}

static void reply(unsigned long long id, const char *result) {
    char buf[512];
    int n = snprintf(buf, sizeof buf, "{\"type\":\"reply\",\"id\":%llu,\"result\":%s}", id, result);
    g_host->send(g_host->ctx, (const uint8_t *)buf, (size_t)n);
}

static void reply_error(unsigned long long id, const char *code, const char *message) {
    char buf[512];
    int n = snprintf(buf, sizeof buf, "{\"type\":\"reply\",\"id\":%llu,\"error\":{\"code\":\"%s\",\"message\":\"%s\"}}",
                     id, code, message);
    g_host->send(g_host->ctx, (const uint8_t *)buf, (size_t)n);
}

static void receive(void *ctx, const uint8_t *bytes, size_t len) {
    (void)ctx;
    const char *json = (const char *)bytes;
    char type[32], method[64];
    unsigned long long id;
    if (!find_string(json, len, "type", type, sizeof type) || !find_uint(json, len, "id", &id)) return;
    if (strcmp(type, "event") == 0) {
        reply(id, "null");
    } else if (strcmp(type, "call") == 0) {
        if (!find_string(json, len, "method", method, sizeof method)) { reply_error(id, "badRequest", "no method"); return; }
        if (strcmp(method, "hello") == 0) {
            reply(id, "\"hello from C\"");
        } else if (strcmp(method, "add") == 0) {
            const char *p = memmem(json, len, "\"params\":[", 10);
            long long a, b;
            if (!p || sscanf(p + 10, "%lld , %lld", &a, &b) != 2) { reply_error(id, "badRequest", "add takes [a, b]"); return; }
            char result[32];
            snprintf(result, sizeof result, "%lld", a + b);
            reply(id, result);
        } else if (strcmp(method, "pid") == 0) {
            char result[32];
            snprintf(result, sizeof result, "%d", (int)getpid());
            reply(id, result);
        } else {
            reply_error(id, "notFound", "no such method; try hello, add or pid");
        }
    } else if (strcmp(type, "open") == 0) {
        reply_error(id, "notFound", "this plugin has no routes");
    }
}

static void destroy(void *ctx) { (void)ctx; }

static const sp_plugin plugin = { SP_ABI_VERSION, NULL, receive, destroy };

const sp_plugin *sp_plugin_create(const sp_host *host) {
    if (host->abi_version != SP_ABI_VERSION) return NULL;
    g_host = host;
    return &plugin;
}
