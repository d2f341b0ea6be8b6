/*
 * A plugin in plain C against sp_plugin.h, to prove the ABI needs nothing from Swift.
 * Build: cc -shared -fPIC -O2 -I Sources/CPluginABI/include -o libchello.so examples/CHello/chello.c
 *
 * Methods: "hello" → "hello from C"; "add" with params [a, b] → a + b; "pid" → the worker's pid;
 * "bytes" with params {"n": N} answers with N raw bytes, a file's worth (supervisor call --output FILE;
 * docs/abi.md "Bytes"); "digest" with params {"data": {"$bytes": 0}} and bytes attached (supervisor
 * call --input FILE) answers {"length": N, "sum": S}, S the sum of the bytes, read in place; "count" with params {"n": N}, called with "stream": true (supervisor call --stream), answers with
 * the stream {"i": 0} … {"i": N-1} (docs/abi.md, "Streams"): chunks go out as the reader's credit
 * allows, from `receive` itself, so the plugin needs no thread. It answers every event with a null
 * result. The JSON handling is deliberately minimal (the
 * supervisor only ever sends well-formed messages); a real plugin would use a JSON library.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "sp_plugin.h"
#include "sp_bytes.h"

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

/* The message goes into a JSON string: a quote or a backslash in it is escaped (a frame that is
   not JSON is a protocol violation, and the worker is ended for it). */
static void reply_error(unsigned long long id, const char *code, const char *message) {
    char escaped[256];
    size_t e = 0;
    for (const char *m = message; *m && e + 2 < sizeof escaped; m++) {
        if (*m == '"' || *m == '\\') escaped[e++] = '\\';
        escaped[e++] = *m;
    }
    escaped[e] = 0;
    char buf[512];
    int n = snprintf(buf, sizeof buf, "{\"type\":\"reply\",\"id\":%llu,\"error\":{\"code\":\"%s\",\"message\":\"%s\"}}",
                     id, code, escaped);
    g_host->send(g_host->ctx, (const uint8_t *)buf, (size_t)n);
}

/* The streams being answered: the call's id, the next element, how many in all, and the credit
   the reader has left (16 to start with; each `credit` message adds its "n"). Only `receive` touches
   them, and the worker calls it one message at a time. */
#define MAX_STREAMS 64
static struct { unsigned long long id, next, count, credit; int used; } streams[MAX_STREAMS];

/* Sends what the credit allows of stream `s`; its final reply once every element went. */
static void pump(int s) {
    char buf[128];
    while (streams[s].credit > 0 && streams[s].next < streams[s].count) {
        int n = snprintf(buf, sizeof buf, "{\"type\":\"chunk\",\"id\":%llu,\"seq\":%llu,\"data\":{\"i\":%llu}}",
                         streams[s].id, streams[s].next, streams[s].next);
        g_host->send(g_host->ctx, (const uint8_t *)buf, (size_t)n);
        streams[s].next++;
        streams[s].credit--;
    }
    if (streams[s].next == streams[s].count) {
        reply(streams[s].id, "null");
        streams[s].used = 0;
    }
}

static int find_stream(unsigned long long id) {
    for (int s = 0; s < MAX_STREAMS; s++) if (streams[s].used && streams[s].id == id) return s;
    return -1;
}

static void receive(void *ctx, const uint8_t *bytes, size_t len) {
    (void)ctx;
    const char *json = (const char *)bytes;
    char type[32], method[64];
    unsigned long long id;
    if (!find_string(json, len, "type", type, sizeof type) || !find_uint(json, len, "id", &id)) return;
    if (strcmp(type, "credit") == 0) {
        unsigned long long n = 0;
        int s = find_stream(id);
        if (s >= 0 && find_uint(json, len, "n", &n)) { streams[s].credit += n; pump(s); }
        return;
    }
    if (strcmp(type, "cancel") == 0) {
        int s = find_stream(id);
        if (s >= 0) streams[s].used = 0;  /* the caller gave up: the supervisor answered it */
        return;
    }
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
        } else if (strcmp(method, "count") == 0) {
            unsigned long long count = 0;
            if (!memmem(json, len, "\"stream\":true", 13)) { reply_error(id, "badRequest", "count answers with a stream: call it with --stream"); return; }
            if (!find_uint(json, len, "n", &count)) { reply_error(id, "badRequest", "count takes {\"n\": N}"); return; }
            int s = find_stream(0xFFFFFFFFFFFFFFFFull);  /* never found: look for a free slot */
            for (s = 0; s < MAX_STREAMS && streams[s].used; s++) {}
            if (s == MAX_STREAMS) { reply_error(id, "unavailable", "too many streams at once"); return; }
            streams[s].id = id; streams[s].next = 0; streams[s].count = count; streams[s].credit = 16; streams[s].used = 1;
            pump(s);
        } else if (strcmp(method, "bytes") == 0) {
            /* {"n": N} → N raw bytes ('a' + i % 26), a file's worth: inline up to 64 KiB, else a
               sealed memfd (sp_bytes.h). The result names them: {"$bytes": 0}. */
            unsigned long long n = 0;
            if (!find_uint(json, len, "n", &n) || n > (1ULL << 31)) { reply_error(id, "badRequest", "bytes takes {\"n\": N}, N up to 2 GiB"); return; }
            char *data = malloc(n ? n : 1);
            if (!data) { reply_error(id, "pluginError", "out of memory"); return; }
            for (unsigned long long i = 0; i < n; i++) data[i] = (char)('a' + i % 26);
            char head[160];
            if (n <= SP_BYTES_INLINE_LIMIT) {
                /* The JSON, one NUL, then the bytes: one message. */
                int h = snprintf(head, sizeof head, "{\"type\":\"reply\",\"id\":%llu,\"result\":{\"$bytes\":0},\"attachments\":[{\"length\":%llu}]}", id, n);
                char *message = malloc((size_t)h + 1 + n);
                if (!message) { free(data); reply_error(id, "pluginError", "out of memory"); return; }
                memcpy(message, head, (size_t)h);
                message[h] = 0;
                memcpy(message + h + 1, data, n);
                g_host->send(g_host->ctx, (const uint8_t *)message, (size_t)h + 1 + n);
                free(message);
            } else {
                int fd = sp_bytes_create(data, n);
                if (fd < 0) { free(data); reply_error(id, "pluginError", "memfd_create failed"); return; }
                int h = snprintf(head, sizeof head, "{\"type\":\"reply\",\"id\":%llu,\"result\":{\"$bytes\":0},\"attachments\":[{\"length\":%llu,\"fd\":%d}]}", id, n, fd);
                g_host->send(g_host->ctx, (const uint8_t *)head, (size_t)h);
                close(fd); /* the worker sent its own copy on */
            }
            free(data);
        } else if (strcmp(method, "digest") == 0) {
            /* The one attachment: {"length": N} (inline, after the NUL that ends the JSON) or
               {"length": N, "fd": D} (a sealed memfd, this plugin's to check, map and close). */
            const char *nul = memchr(json, 0, len);
            const char *list = memmem(json, nul ? (size_t)(nul - json) : len, "\"attachments\":[{", 16);
            unsigned long long n = 0, fd = 0;
            if (!list || !find_uint(list, len - (size_t)(list - json), "length", &n)) {
                reply_error(id, "badRequest", "digest takes {\"data\": {\"$bytes\": 0}} with the bytes attached (supervisor call --input FILE)");
                return;
            }
            const unsigned char *data;
            int has_fd = find_uint(list, (size_t)((nul ? nul : json + len) - list), "fd", &fd);
            /* The bytes it takes are the message's one attachment: {"$bytes": 0}, nothing else. */
            unsigned long long index = 0;
            if (!find_uint(json, (size_t)(list - json), "$bytes", &index) || index != 0) {
                if (has_fd) close((int)fd);
                reply_error(id, "badRequest", "digest takes {\"data\": {\"$bytes\": 0}}, the one attachment; these params name another");
                return;
            }
            if (has_fd) {
                if (sp_bytes_check((int)fd, n) != 0) { close((int)fd); reply_error(id, "badRequest", "the attached descriptor is not a sealed memfd of its length"); return; }
                data = sp_bytes_map((int)fd, n);
                if (!data) { close((int)fd); reply_error(id, "pluginError", "cannot map the bytes"); return; }
            } else {
                if (!nul || (size_t)(json + len - nul - 1) != n) { reply_error(id, "badRequest", "the inline bytes are not of the announced length"); return; }
                data = (const unsigned char *)nul + 1;
            }
            unsigned long long sum = 0;
            for (unsigned long long i = 0; i < n; i++) sum += data[i];
            if (has_fd) { sp_bytes_unmap(data, n); close((int)fd); }
            char result[96];
            snprintf(result, sizeof result, "{\"length\":%llu,\"sum\":%llu}", n, sum);
            reply(id, result);
        } else if (strcmp(method, "pid") == 0) {
            char result[32];
            snprintf(result, sizeof result, "%d", (int)getpid());
            reply(id, result);
        } else {
            reply_error(id, "notFound", "no such method; try hello, add, count, bytes, digest or pid");
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
