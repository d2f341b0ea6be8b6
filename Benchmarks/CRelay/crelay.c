/*
 * The benchmark's plugin→plugin caller in C (supervisor-bench, "plugin → plugin, C"): every call
 * it gets becomes a call of bench.callee's `ping`, and the callee's answer becomes its own. Beside
 * the Swift SDK's caller (TestKit's `call`), it shows what the supervisor's part of a nested call
 * costs without the SDK's async path and JSON coding.
 *
 * receive() runs on the worker's I/O thread only, so the table of calls in flight needs no lock.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sp_plugin.h"

#define SLOTS 4096

static const sp_host *host;
static unsigned long long next_id = 1;
/* Our call's id (mod SLOTS) → the id of the call it answers, 0 when free. */
static unsigned long long answers[SLOTS];

static int id_field(const char *json, size_t len, unsigned long long *id) {
    const char *p = memmem(json, len, "\"id\":", 5);
    if (!p) return 0;
    *id = strtoull(p + 5, NULL, 10);
    return 1;
}

static void send_text(const char *frame, int n) { host->send(host->ctx, (const uint8_t *)frame, (size_t)n); }

static void receive(void *ctx, const uint8_t *bytes, size_t len) {
    (void)ctx;
    const char *json = (const char *)bytes;
    unsigned long long id;
    char frame[512];
    if (!id_field(json, len, &id)) return;
    if (memmem(json, len, "\"type\":\"reply\"", 14)) {
        unsigned long long caller = answers[id % SLOTS];
        if (caller == 0) return;
        answers[id % SLOTS] = 0;
        /* The callee's result (or error) member, copied as it came: everything after "id":N, up to
         * the frame's closing brace. */
        const char *member = memmem(json, len, "\"result\":", 9);
        if (!member) member = memmem(json, len, "\"error\":", 8);
        if (!member) return;
        int rest = (int)(json + len - member) - 1; /* without the closing brace */
        int n = snprintf(frame, sizeof frame, "{\"type\":\"reply\",\"id\":%llu,%.*s}", caller, rest, member);
        if (n > 0 && n < (int)sizeof frame) send_text(frame, n);
    } else if (memmem(json, len, "\"type\":\"call\"", 13)) {
        unsigned long long mine = next_id++;
        if (answers[mine % SLOTS] != 0) { /* SLOTS calls in flight already */
            int n = snprintf(frame, sizeof frame, "{\"type\":\"reply\",\"id\":%llu,\"error\":{\"code\":\"unavailable\",\"message\":\"too many calls in flight\"}}", id);
            send_text(frame, n);
            return;
        }
        answers[mine % SLOTS] = id;
        int n = snprintf(frame, sizeof frame, "{\"type\":\"call\",\"id\":%llu,\"target\":\"bench.callee\",\"method\":\"ping\"}", mine);
        send_text(frame, n);
    } else if (memmem(json, len, "\"type\":\"event\"", 14)) {
        int n = snprintf(frame, sizeof frame, "{\"type\":\"reply\",\"id\":%llu,\"result\":null}", id);
        send_text(frame, n);
    }
}

static void destroy(void *ctx) { (void)ctx; }

static const sp_plugin plugin = { SP_ABI_VERSION, NULL, receive, destroy };

const sp_plugin *sp_plugin_create(const sp_host *h) {
    if (h->abi_version != SP_ABI_VERSION) return NULL;
    host = h;
    return &plugin;
}
