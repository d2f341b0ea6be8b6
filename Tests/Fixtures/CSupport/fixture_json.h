/* The tiny JSON field finder the C test plugins share (the supervisor only ever sends well-formed
   messages; a real plugin would use a JSON library). examples/CHello/chello.c keeps its own copy
   on purpose: the example stays one self-contained file. */
#ifndef FIXTURE_JSON_H
#define FIXTURE_JSON_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Copies the string value of "key" into out (no escapes handled). Returns 1 if found. */
static inline int find_string(const char *json, size_t len, const char *key, char *out, size_t cap) {
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

/* The unsigned number after "key":, if there is one. Returns 1 if found. */
static inline int find_uint(const char *json, size_t len, const char *key, unsigned long long *out) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":", key);
    const char *p = memmem(json, len, pattern, strlen(pattern));
    if (!p) return 0;
    *out = strtoull(p + strlen(pattern), NULL, 10);
    return 1;
}
#endif
