/*
 * A test plugin made of the libraries real plugins use (SPEC §5): SQLite with temporary files,
 * OpenSSL (its config, SHA-256, RAND_bytes), zlib, pthreads with eventfd/epoll/timerfd, POSIX timers
 * and interval timers, naming its own threads, mlock, lowering its own priority, /proc/self/exe, and
 * an embedded CPython running `tempfile` and `sqlite3`. Each method answers "ok" or a pluginError
 * naming the call that failed and its errno, so a false denial of the sandbox shows as a test failure.
 * Built by the tests with: cc -shared -fPIC reallibs.c -lsqlite3 -lcrypto -lz -lpython3.11 -lpthread
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/timerfd.h>
#include <openssl/conf.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sqlite3.h>
#include <zlib.h>
#include <Python.h>
#include "sp_plugin.h"
#include "fixture_json.h"

static const sp_host *g_host;
static char g_error[400];

static void send_text(const char *text) { g_host->send(g_host->ctx, (const uint8_t *)text, strlen(text)); }

/* Records the first failure: "what: strerror(errno)". Returns -1. */
static int fail(const char *what) {
    int e = errno;
    snprintf(g_error, sizeof g_error, "%s: %s (errno %d)", what, strerror(e), e);
    for (char *c = g_error; *c; c++) if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20) *c = ' ';
    return -1;
}

static int fail_text(const char *what, const char *detail) {
    snprintf(g_error, sizeof g_error, "%s: %s", what, detail ? detail : "?");
    for (char *c = g_error; *c; c++) if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20) *c = ' ';
    return -1;
}

/* ---- the behaviours ---- */

static int do_sqlite(void) {
    sqlite3 *db;
    if (sqlite3_open(":memory:", &db) != SQLITE_OK) return fail_text("sqlite3_open", sqlite3_errmsg(db));
    /* temp_store=FILE and a sort larger than the cache: SQLite writes temporary files in its
       temporary folder (SQLITE_TMPDIR / TMPDIR). */
    const char *sql =
        "PRAGMA temp_store=FILE; PRAGMA cache_size=10;"
        "CREATE TEMP TABLE t(x TEXT);"
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 20000)"
        " INSERT INTO t SELECT hex(randomblob(64)) FROM n;"
        "CREATE TEMP TABLE s AS SELECT x FROM t ORDER BY x;";
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
        fail_text("sqlite3_exec (temp files)", err);
        sqlite3_free(err);
        sqlite3_close(db);
        return -1;
    }
    sqlite3_close(db);
    return 0;
}

static int do_openssl(void) {
    if (!OPENSSL_init_crypto(OPENSSL_INIT_LOAD_CONFIG, NULL)) return fail_text("OPENSSL_init_crypto", "failed");
    if (CONF_modules_load_file(NULL, NULL, 0) <= 0) return fail_text("CONF_modules_load_file", "cannot load openssl.cnf");
    unsigned char digest[32];
    unsigned int n = 0;
    if (!EVP_Digest("abc", 3, digest, &n, EVP_sha256(), NULL) || n != 32 || digest[0] != 0xba)
        return fail_text("EVP_Digest(SHA-256)", "wrong digest");
    unsigned char random[32];
    if (RAND_bytes(random, sizeof random) != 1) return fail_text("RAND_bytes", "failed");
    return 0;
}

static int do_zlib(void) {
    char input[4096];
    for (size_t i = 0; i < sizeof input; i++) input[i] = (char)('a' + i % 7);
    unsigned char packed[8192], unpacked[4096];
    uLongf plen = sizeof packed, ulen = sizeof unpacked;
    if (compress(packed, &plen, (const Bytef *)input, sizeof input) != Z_OK) return fail_text("compress", "failed");
    if (uncompress(unpacked, &ulen, packed, plen) != Z_OK || ulen != sizeof input || memcmp(unpacked, input, ulen) != 0)
        return fail_text("uncompress", "failed");
    return 0;
}

static void *named_thread(void *arg) {
    int fd = *(int *)arg;
    uint64_t one = 1;
    usleep(20000);
    if (write(fd, &one, sizeof one) != sizeof one) return (void *)1;
    return NULL;
}

static int do_threads(void) {
    int ev = eventfd(0, EFD_CLOEXEC);
    if (ev < 0) return fail("eventfd");
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) return fail("epoll_create1");
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
    if (tfd < 0) return fail("timerfd_create");
    struct itimerspec its = { {0, 0}, {0, 5000000} };
    if (timerfd_settime(tfd, 0, &its, NULL) != 0) return fail("timerfd_settime");
    struct epoll_event e1 = { .events = EPOLLIN, .data.fd = ev }, e2 = { .events = EPOLLIN, .data.fd = tfd };
    if (epoll_ctl(ep, EPOLL_CTL_ADD, ev, &e1) != 0 || epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &e2) != 0) return fail("epoll_ctl");
    pthread_t t;
    if ((errno = pthread_create(&t, NULL, named_thread, &ev)) != 0) return fail("pthread_create");
    /* Naming another thread writes /proc/self/task/<tid>/comm. */
    if ((errno = pthread_setname_np(t, "reallibs-io")) != 0) return fail("pthread_setname_np (another thread)");
    char name[16];
    if ((errno = pthread_getname_np(t, name, sizeof name)) != 0) return fail("pthread_getname_np");
    if ((errno = pthread_setname_np(pthread_self(), "reallibs-main")) != 0) return fail("pthread_setname_np (itself)");
    int seen = 0;
    for (int rounds = 0; rounds < 20 && seen != 3; rounds++) {
        struct epoll_event out[2];
        int n = epoll_wait(ep, out, 2, 1000);
        if (n < 0) return fail("epoll_wait");
        for (int i = 0; i < n; i++) {
            uint64_t count;
            if (read(out[i].data.fd, &count, sizeof count) != sizeof count) return fail("read (eventfd or timerfd)");
            seen |= out[i].data.fd == ev ? 1 : 2;
        }
    }
    void *rc;
    pthread_join(t, &rc);
    close(ev); close(ep); close(tfd);
    if (seen != 3) return fail_text("epoll", "eventfd or timerfd never became readable");
    if (strcmp(name, "reallibs-io") != 0) return fail_text("pthread_getname_np", name);
    return 0;
}

static volatile sig_atomic_t fired;
static void on_alarm(int sig) { (void)sig; fired++; }

static int do_timers(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    if (sigaction(SIGALRM, &sa, NULL) != 0) return fail("sigaction(SIGALRM)");
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGALRM);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    timer_t timer;
    struct sigevent sev;
    memset(&sev, 0, sizeof sev);
    sev.sigev_notify = SIGEV_SIGNAL;
    sev.sigev_signo = SIGALRM;
    if (timer_create(CLOCK_MONOTONIC, &sev, &timer) != 0) return fail("timer_create");
    struct itimerspec its = { {0, 0}, {0, 1000000} };
    if (timer_settime(timer, 0, &its, NULL) != 0) return fail("timer_settime");
    for (int i = 0; i < 200 && !fired; i++) usleep(1000);
    if (timer_delete(timer) != 0) return fail("timer_delete");
    struct itimerval iv = { {0, 0}, {0, 1000} }, old;
    if (setitimer(ITIMER_REAL, &iv, NULL) != 0) return fail("setitimer");
    if (getitimer(ITIMER_REAL, &old) != 0) return fail("getitimer");
    for (int i = 0; i < 200 && fired < 2; i++) usleep(1000);
    alarm(0);
    if (fired < 2) return fail_text("timers", "SIGALRM did not arrive");
    return 0;
}

static int do_mlock(void) {
    long page = sysconf(_SC_PAGESIZE);
    void *p = aligned_alloc((size_t)page, (size_t)page);
    if (!p) return fail("aligned_alloc");
    memset(p, 1, (size_t)page);
    if (mlock(p, (size_t)page) != 0) { free(p); return fail("mlock"); }
    if (munlock(p, (size_t)page) != 0) { free(p); return fail("munlock"); }
    free(p);
    return 0;
}

static int do_nice(void) {
    errno = 0;
    int before = getpriority(PRIO_PROCESS, 0);
    if (before == -1 && errno) return fail("getpriority");
    if (setpriority(PRIO_PROCESS, 0, before < 19 ? before + 1 : 19) != 0) return fail("setpriority (lower)");
    struct sched_param param = { 0 };
    if (sched_setscheduler(0, SCHED_BATCH, &param) != 0) return fail("sched_setscheduler(SCHED_BATCH)");
    return 0;
}

static int do_procexe(void) {
    char path[4096];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    if (n <= 0) return fail("readlink(/proc/self/exe)");
    FILE *f = fopen("/proc/self/exe", "rb");
    if (!f) return fail("open(/proc/self/exe)");
    char magic[4];
    size_t got = fread(magic, 1, 4, f);
    fclose(f);
    if (got != 4 || memcmp(magic, "\177ELF", 4) != 0) return fail_text("read(/proc/self/exe)", "not an ELF file");
    return 0;
}

static int do_python(void) {
    if (!Py_IsInitialized()) {
        /* The worker loads a plugin with RTLD_LOCAL; CPython's extension modules (_sqlite3) expect
           libpython's symbols to be global, so an embedding plugin makes them so, as any embedder
           loaded with dlopen must. */
        if (!dlopen("libpython3.11.so.1.0", RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD)) return fail_text("dlopen(libpython, RTLD_GLOBAL)", dlerror());
        Py_InitializeEx(0);
        if (!Py_IsInitialized()) return fail_text("Py_InitializeEx", "failed");
    }
    const char *code =
        "import tempfile, sqlite3, os\n"
        "with tempfile.NamedTemporaryFile() as f:\n"
        "    f.write(b'x' * 1000); f.flush()\n"
        "d = tempfile.mkdtemp()\n"
        "db = sqlite3.connect(os.path.join(d, 'x.db'))\n"
        "db.execute('create table t(x)'); db.execute('insert into t values (1)'); db.commit()\n"
        "assert db.execute('select count(*) from t').fetchone()[0] == 1\n"
        "db.close()\n";
    PyObject *main = PyImport_AddModule("__main__");
    PyObject *globals = PyModule_GetDict(main);
    PyObject *r = PyRun_String(code, Py_file_input, globals, globals);
    if (!r) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyObject *text = value ? PyObject_Str(value) : NULL;
        fail_text("python", text ? PyUnicode_AsUTF8(text) : "an exception");
        Py_XDECREF(text); Py_XDECREF(type); Py_XDECREF(value); Py_XDECREF(tb);
        return -1;
    }
    Py_DECREF(r);
    return 0;
}

/* What must stay denied beside what is now allowed: raising its own priority, touching another
   process's priority or scheduler, a real-time policy. "ok" when each is refused. */
static int do_still_denied(void) {
    if (setpriority(PRIO_PROCESS, 0, -5) == 0) return fail_text("setpriority(-5)", "raising the priority was allowed");
    /* In a PID namespace of its own the parent is invisible (getppid() is 0, which means itself). */
    if (getppid() != 0 && setpriority(PRIO_PROCESS, (id_t)getppid(), 19) == 0) return fail_text("setpriority(parent)", "another process's priority was changed");
    struct sched_param rt = { 1 };
    if (sched_setscheduler(0, SCHED_FIFO, &rt) == 0) return fail_text("sched_setscheduler(SCHED_FIFO)", "a real-time policy was allowed");
    FILE *f = fopen("/proc/1/comm", "w");
    if (f) { fclose(f); return fail_text("open(/proc/1/comm, w)", "another process's file was writable"); }
    return 0;
}

static const struct { const char *name; int (*run)(void); } methods[] = {
    {"stillDenied", do_still_denied},
    {"sqlite", do_sqlite}, {"openssl", do_openssl}, {"zlib", do_zlib}, {"threads", do_threads},
    {"timers", do_timers}, {"mlock", do_mlock}, {"nice", do_nice}, {"procexe", do_procexe}, {"python", do_python},
};

static void receive(void *ctx, const uint8_t *bytes, size_t len) {
    (void)ctx;
    const char *json = (const char *)bytes;
    char type[32], method[64], buf[600];
    unsigned long long id;
    if (!find_string(json, len, "type", type, sizeof type) || !find_uint(json, len, "id", &id)) return;
    if (strcmp(type, "call") != 0) {
        snprintf(buf, sizeof buf, "{\"type\":\"reply\",\"id\":%llu,\"result\":null}", id);
        return send_text(buf);
    }
    find_string(json, len, "method", method, sizeof method);
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
        if (strcmp(methods[i].name, method) != 0) continue;
        g_error[0] = 0;
        if (methods[i].run() == 0) {
            snprintf(buf, sizeof buf, "{\"type\":\"reply\",\"id\":%llu,\"result\":\"ok\"}", id);
        } else {
            snprintf(buf, sizeof buf, "{\"type\":\"reply\",\"id\":%llu,\"error\":{\"code\":\"pluginError\",\"message\":\"%s\"}}", id, g_error);
        }
        return send_text(buf);
    }
    snprintf(buf, sizeof buf, "{\"type\":\"reply\",\"id\":%llu,\"error\":{\"code\":\"notFound\",\"message\":\"no method\"}}", id);
    send_text(buf);
}

static void destroy(void *ctx) { (void)ctx; }

static const sp_plugin plugin = { SP_ABI_VERSION, NULL, receive, destroy };

const sp_plugin *sp_plugin_create(const sp_host *host) {
    g_host = host;
    return &plugin;
}
