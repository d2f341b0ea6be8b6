#define _GNU_SOURCE
#include "install_support.h"
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>


void cis_curl_global_init(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

typedef struct sink {
    int fd;
    int64_t written;
    int64_t max;
    int too_large;
    int write_failed;
} sink;

static size_t on_body(char *data, size_t size, size_t n, void *userdata) {
    sink *s = userdata;
    size_t len = size * n;
    if (s->written + (int64_t)len > s->max) { s->too_large = 1; return 0; }
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(s->fd, data + done, len - done);
        if (w < 0) { if (errno == EINTR) continue; s->write_failed = 1; return 0; }
        done += (size_t)w;
    }
    s->written += (int64_t)len;
    return len;
}

static void copy_header_value(const char *line, size_t len, size_t name_len, char *out, size_t cap) {
    const char *v = line + name_len;
    const char *end = line + len;
    while (v < end && (*v == ' ' || *v == '\t')) v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ')) end--;
    size_t n = (size_t)(end - v);
    if (n >= cap) n = cap - 1;
    memcpy(out, v, n);
    out[n] = 0;
}

static size_t on_header(char *line, size_t size, size_t n, void *userdata) {
    cis_fetch_result *r = userdata;
    size_t len = size * n;
    /* A redirect's headers come first: keep only the last response's. */
    if (len >= 5 && strncasecmp(line, "HTTP/", 5) == 0) { r->etag[0] = 0; r->last_modified[0] = 0; }
    if (len > 5 && strncasecmp(line, "ETag:", 5) == 0) copy_header_value(line, len, 5, r->etag, sizeof r->etag);
    if (len > 14 && strncasecmp(line, "Last-Modified:", 14) == 0)
        copy_header_value(line, len, 14, r->last_modified, sizeof r->last_modified);
    return len;
}

typedef struct progress_box { const cis_fetch_options *o; } progress_box;

static int on_progress(void *p, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow) {
    (void)ultotal; (void)ulnow;
    const cis_fetch_options *o = ((progress_box *)p)->o;
    if (o->progress) o->progress(o->progress_ctx, (int64_t)dlnow, (int64_t)dltotal);
    return 0;
}

void cis_fetch(const char *url, int out_fd, const cis_fetch_options *o, cis_fetch_result *r) {
    memset(r, 0, sizeof *r);
    CURL *c = curl_easy_init();
    if (!c) { r->curl_code = CURLE_FAILED_INIT; snprintf(r->error, sizeof r->error, "curl_easy_init failed"); return; }
    char errbuf[CURL_ERROR_SIZE] = {0};
    sink s = { out_fd, 0, o->max_bytes, 0, 0 };
    progress_box box = { o };
    struct curl_slist *headers = NULL;
    char line[512];

    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https,file");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, o->max_redirects);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, o->connect_timeout_s);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, o->low_speed_limit);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, o->low_speed_time_s);
    if (o->total_timeout_s > 0) curl_easy_setopt(c, CURLOPT_TIMEOUT, o->total_timeout_s);
    curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)o->max_bytes);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_FAILONERROR, 0L);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "sandboxed-plugins-supervisor/1");
    if (o->progress) {
        curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(c, CURLOPT_XFERINFODATA, &box);
        curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    }
    if (o->if_none_match && *o->if_none_match) {
        snprintf(line, sizeof line, "If-None-Match: %s", o->if_none_match);
        headers = curl_slist_append(headers, line);
    }
    if (o->if_modified_since && *o->if_modified_since) {
        snprintf(line, sizeof line, "If-Modified-Since: %s", o->if_modified_since);
        headers = curl_slist_append(headers, line);
    }
    if (headers) curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);

    CURLcode rc = curl_easy_perform(c);
    r->curl_code = (int)rc;
    r->bytes = s.written;
    r->too_large = s.too_large || rc == CURLE_FILESIZE_EXCEEDED;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->http_status);
    char *eff = NULL;
    if (curl_easy_getinfo(c, CURLINFO_EFFECTIVE_URL, &eff) == CURLE_OK && eff)
        snprintf(r->effective_url, sizeof r->effective_url, "%s", eff);
    if (rc != CURLE_OK) {
        snprintf(r->error, sizeof r->error, "%s", errbuf[0] ? errbuf : curl_easy_strerror(rc));
    }
    if (s.write_failed) snprintf(r->error, sizeof r->error, "writing the download failed: %s", strerror(errno));
    curl_slist_free_all(headers);
    curl_easy_cleanup(c);
}
