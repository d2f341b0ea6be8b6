#ifndef INSTALL_SUPPORT_H
#define INSTALL_SUPPORT_H
#include <stdint.h>
#include <stddef.h>

/* One HTTP(S) or file:// download with libcurl, streamed into `out_fd`.
   curl_easy_setopt is variadic, so the transfer is configured here, in C. */
typedef struct cis_fetch_options {
    int64_t max_bytes;          /* abort past this many body bytes */
    long max_redirects;         /* redirects followed, http(s) only */
    long connect_timeout_s;
    long low_speed_limit;       /* bytes/s ... */
    long low_speed_time_s;      /* ... below which for this long aborts */
    long total_timeout_s;       /* 0: none */
    const char *if_none_match;  /* ETag to send, or NULL */
    const char *if_modified_since; /* HTTP date to send, or NULL */
    /* Progress: called with bytes so far and the expected total (0 when unknown). */
    void (*progress)(void *ctx, int64_t now, int64_t total);
    void *progress_ctx;
} cis_fetch_options;

typedef struct cis_fetch_result {
    int curl_code;              /* CURLE_OK or the failure */
    long http_status;           /* 0 for file:// */
    int64_t bytes;
    int too_large;              /* aborted at max_bytes */
    char etag[256];
    char last_modified[128];
    char effective_url[1024];
    char error[512];
} cis_fetch_result;

/* Process-wide libcurl set-up; call once before any fetch. */
void cis_curl_global_init(void);
void cis_fetch(const char *url, int out_fd, const cis_fetch_options *options, cis_fetch_result *result);

#endif
