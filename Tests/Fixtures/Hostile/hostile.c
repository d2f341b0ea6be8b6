/*
 * A hostile plugin for the sandbox tests, in C so each attack is the raw call it claims to be.
 * Each method tries one thing and answers {"rc": <return>, "errno": <errno>} when it survives it;
 * the fatal ones end the worker instead (the supervisor records sandboxViolation + the syscall).
 * The misbehaviours for the fault tests (segv, abort, hang, alloc, mapFile, closeAll, exhaustFds, chatty, stdoutFlood, socketFlood, garbage, garbageThenReply,
 * giant, exit3, exit0, forkbomb, blockLoop, logAnyJSON, logForged) live here too.
 * If the bundle holds a file named `ctor-action`, that action also runs in the library constructor,
 * before sp_plugin_create; its outcome is returned by the method "ctorResult". The action
 * `announce` there counts the library's loads instead (see announce()).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>
#include "sp_plugin.h"
#include "sp_bytes.h"
#include "fixture_json.h"

static const sp_host *g_host;
static char ctor_result[128] = "null";
/* ctor-action `declareMany`: sp_plugin_create declares 1,024 methods idempotent, then one more;
 * `ctorResult` answers both return codes. */
static int declare_many;
/* What it was handed, in order ("event:<name>" or "call:<method>"), for the `heard` method: a test
   of the order in which requests that waited for it are delivered. Only `receive` touches it. */
static char heard[4096] = "[";
static size_t heard_len = 1;

static void hear(const char *kind, const char *name) {
    char item[96];
    int n = snprintf(item, sizeof item, "%s\"%s:%s\"", heard_len > 1 ? "," : "", kind, name);
    if (n > 0 && heard_len + (size_t)n + 2 < sizeof heard) { memcpy(heard + heard_len, item, (size_t)n); heard_len += (size_t)n; }
}

static long find_number(const char *json, size_t len, const char *key, long fallback) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":", key);
    const char *p = memmem(json, len, pattern, strlen(pattern));
    return p ? strtol(p + strlen(pattern), NULL, 10) : fallback;
}

/* `chatty`: a log message from a thread of its own every 300 µs, for as long as the worker lives. */
static void *chatter(void *arg) {
    (void)arg;
    const char *line = "{\"type\":\"log\",\"level\":\"debug\",\"message\":\"chat\"}";
    for (;;) {
        g_host->send(g_host->ctx, (const uint8_t *)line, strlen(line));
        usleep(300);
    }
    return NULL;
}

static void *stdout_flood(void *arg) {
    (void)arg;
    char line[256];
    memset(line, 'z', sizeof line);
    line[sizeof line - 1] = '\n';
    for (;;) { if (write(1, line, sizeof line) < 0) usleep(1000); }
    return NULL;
}

static void *socket_flood(void *arg) {
    (void)arg;
    const char *msg = "{\"type\":\"log\",\"level\":\"info\",\"message\":\"flood\"}";
    for (;;) { if (g_host->send(g_host->ctx, (const uint8_t *)msg, strlen(msg)) != 0) usleep(1000); }
    return NULL;
}

/* Calls to a plugin nobody installed, as fast as they go, from a thread, while the worker's I/O
 * thread is held in `receive` and reads none of the answers (askWithoutReading). */
static void *ask_without_reading(void *arg) {
    (void)arg;
    char call[160];
    for (unsigned long long id = 1ULL << 40;; id++) {
        int n = snprintf(call, sizeof call, "{\"type\":\"call\",\"id\":%llu,\"target\":\"nobody.here\",\"method\":\"x\",\"params\":{}}", id);
        if (g_host->send(g_host->ctx, (const uint8_t *)call, (size_t)n) != 0) return NULL;
    }
}

static void *exec_in_thread(void *arg) {
    (void)arg;
    execl("/bin/sh", "sh", "-c", "true", (char *)NULL);
    return NULL;
}

/* Runs one attack; writes {"rc":..,"errno":..} into out. */
static void attack(const char *what, const char *path, long number, char *out, size_t cap) {
    long rc = -1;
    errno = 0;
    if (!strcmp(what, "openShadow")) {
        rc = open("/etc/shadow", O_RDONLY);
    } else if (!strcmp(what, "openPath")) {
        rc = open(path, O_RDONLY);
    } else if (!strcmp(what, "writePath")) {
        rc = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    } else if (!strcmp(what, "connect")) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (s < 0) { rc = s; }
        else {
            struct sockaddr_in a;
            memset(&a, 0, sizeof a);
            a.sin_family = AF_INET;
            a.sin_port = htons((unsigned short)number);
            a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            rc = connect(s, (struct sockaddr *)&a, sizeof a);
        }
    } else if (!strcmp(what, "fork")) {
        rc = fork();
        if (rc == 0) _exit(0);
    } else if (!strcmp(what, "exec")) {
        rc = execl("/bin/sh", "sh", "-c", "true", (char *)NULL);
    } else if (!strcmp(what, "threadExec")) {
        pthread_t t;
        pthread_create(&t, NULL, exec_in_thread, NULL);
        pthread_join(t, NULL);
        rc = 0;
    } else if (!strcmp(what, "listProcs")) {
        /* rc: how many processes /proc lists (numeric entries). */
        DIR *d = opendir("/proc");
        rc = 0;
        if (!d) rc = -1;
        else {
            struct dirent *e;
            while ((e = readdir(d)) != NULL) if (e->d_name[0] >= '1' && e->d_name[0] <= '9') rc++;
            closedir(d);
        }
    } else if (!strcmp(what, "getpid")) {
        rc = getpid();
    } else if (!strcmp(what, "spin")) {
        /* Busy for `number` ms of wall time; rc is the CPU time it got, in ms (a cgroup's cpu.max shows). */
        struct timespec start, now, cpu0, cpu1;
        clock_gettime(CLOCK_MONOTONIC, &start);
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu0);
        do {
            for (volatile int i = 0; i < 10000; i++) {}
            clock_gettime(CLOCK_MONOTONIC, &now);
        } while ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 < number);
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu1);
        rc = (cpu1.tv_sec - cpu0.tv_sec) * 1000 + (cpu1.tv_nsec - cpu0.tv_nsec) / 1000000;
    } else if (!strcmp(what, "system")) {
        /* libc blocks every signal before it spawns the shell: no SIGSYS handler can run. */
        rc = system("true");
    } else if (!strcmp(what, "posixSpawn")) {
        pid_t child;
        char *argv[] = { "true", NULL };
        rc = posix_spawn(&child, "/bin/true", NULL, NULL, argv, NULL);
    } else if (!strcmp(what, "blockedExec")) {
        /* Every signal blocked, then execve: the forced SIGSYS would kill without naming the call. */
        sigset_t all;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, NULL);
        rc = execl("/bin/sh", "sh", "-c", "true", (char *)NULL);
    } else if (!strcmp(what, "ptrace")) {
        rc = ptrace(PTRACE_ATTACH, (pid_t)number, 0, 0);
    } else if (!strcmp(what, "x32")) {
        rc = syscall(0x40000000 | 39 /* getpid in the x32 ABI */);
    } else if (!strcmp(what, "clone3")) {
        rc = syscall(435 /* clone3 */, NULL, 0);
    } else if (!strcmp(what, "iouring")) {
        char params[120];
        memset(params, 0, sizeof params);
        rc = syscall(425 /* io_uring_setup */, 8, params);
    } else if (!strcmp(what, "setrlimitUp")) {
        /* Its memory limit raised: refused by the filter (its own RLIMIT_NOFILE may be set, and the
         * kernel refuses raising that one: setrlimitNofileUp). */
        struct rlimit rl;
        getrlimit(RLIMIT_DATA, &rl);
        rl.rlim_cur = rl.rlim_max = rl.rlim_max * 2 + 1024;
        rc = setrlimit(RLIMIT_DATA, &rl);
    } else if (!strcmp(what, "setrlimitNofileUp")) {
        struct rlimit rl;
        getrlimit(RLIMIT_NOFILE, &rl);
        rl.rlim_cur = rl.rlim_max = rl.rlim_max * 2 + 1024;
        rc = setrlimit(RLIMIT_NOFILE, &rl);
    } else if (!strcmp(what, "kill")) {
        rc = kill((pid_t)number, SIGTERM);
    } else if (!strcmp(what, "readMem")) {
        char p[64];
        snprintf(p, sizeof p, "/proc/%ld/mem", number);
        rc = open(p, O_RDONLY);
    } else if (!strcmp(what, "replaceSigsys")) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = SIG_IGN;
        rc = sigaction(SIGSYS, &sa, NULL);
    } else if (!strcmp(what, "clearPdeathsig")) {
        rc = prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0);
    } else if (!strcmp(what, "tiocsti")) {
        char c = 'x';
        rc = ioctl(0, TIOCSTI, &c);
    } else if (!strcmp(what, "unshare")) {
        rc = unshare(0x10000000 /* CLONE_NEWUSER */);
    } else if (!strcmp(what, "controlSocket")) {
        /* Connect to the supervisor's control socket and ask it to stop. */
        int s = socket(AF_UNIX, SOCK_STREAM, 0);
        struct sockaddr_un a;
        memset(&a, 0, sizeof a);
        a.sun_family = AF_UNIX;
        snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
        rc = s < 0 ? s : connect(s, (struct sockaddr *)&a, sizeof a);
        if (rc == 0) {
            const char *body = "{\"type\":\"stop\",\"id\":1}";
            unsigned char header[4] = { 0, 0, 0, (unsigned char)strlen(body) };
            if (write(s, header, 4) == 4 && write(s, body, strlen(body)) == (ssize_t)strlen(body)) {
                char reply[256];
                rc = read(s, reply, sizeof reply); /* 0: the supervisor hung up on us */
            }
        }
    } else if (!strcmp(what, "dgramPair")) {
        /* A datagram pair could be re-connected to a socket file such as /dev/log. */
        int sv[2];
        rc = socketpair(AF_UNIX, SOCK_DGRAM, 0, sv);
        if (rc == 0) { close(sv[0]); close(sv[1]); }
    } else if (!strcmp(what, "streamPair")) {
        int sv[2];
        rc = socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv);
        if (rc == 0) { close(sv[0]); close(sv[1]); }
    } else if (!strcmp(what, "forgeExit")) {
        const char *notice = "{\"type\":\"exit\",\"reason\":\"sandboxViolation\",\"syscall\":\"ptrace\",\"message\":\"forged\"}";
        g_host->send(g_host->ctx, (const uint8_t *)notice, strlen(notice));
        usleep(50000);
        raise(SIGSEGV);
    } else if (!strcmp(what, "forgeNotice")) {
        /* Says it is ending, and does not: the supervisor must not be fooled into anything lasting. */
        const char *notice = "{\"type\":\"exit\",\"reason\":\"signaled\",\"signal\":\"SIGSEGV\",\"message\":\"forged\"}";
        rc = g_host->send(g_host->ctx, (const uint8_t *)notice, strlen(notice));
    } else if (!strcmp(what, "takenMark") || !strcmp(what, "takenMarkThenBlock")) {
        /* A worker that lies about which calls its plugin took (SPEC §15): `number` written over its
         * taken page's mark (found in /proc/self/maps as the memfd sp-taken); then, for the second,
         * 20 s of blocking, so that calls wait in its socket behind it. */
        FILE *maps = fopen("/proc/self/maps", "r");
        char line[512];
        unsigned long start = 0;
        while (maps && fgets(line, sizeof line, maps)) {
            if (strstr(line, "sp-taken")) { start = strtoul(line, NULL, 16); break; }
        }
        if (maps) fclose(maps);
        if (start) {
            __atomic_store_n((unsigned long long *)start, (unsigned long long)number, __ATOMIC_RELEASE);
            rc = 0;
        } else {
            errno = ENOENT;
        }
        fprintf(stderr, "taken mark set to %ld\n", number);
        fflush(stderr);
        if (!strcmp(what, "takenMarkThenBlock")) usleep(20 * 1000 * 1000);
    } else if (!strcmp(what, "segv")) {
        raise(SIGSEGV);
    } else if (!strcmp(what, "abort")) {
        abort();
    } else if (!strcmp(what, "exit3")) {
        exit(3);
    } else if (!strcmp(what, "exit0")) {
        exit(0);
    } else if (!strcmp(what, "hang") || !strcmp(what, "blockLoop")) {
        for (volatile unsigned long i = 0;; i++) {}
    } else if (!strcmp(what, "alloc")) {
        for (;;) {
            char *p = malloc(8 << 20);
            if (!p) { raise(SIGABRT); }
            memset(p, 1, 8 << 20);
        }
    } else if (!strcmp(what, "chatty")) {
        pthread_t t;
        rc = pthread_create(&t, NULL, chatter, NULL);
    } else if (!strcmp(what, "exhaustFds")) {
        /* Every descriptor its open-files limit leaves, kept: rc is how many it got. */
        while (open("/dev/null", O_RDONLY | O_CLOEXEC) >= 0) rc++;
    } else if (!strcmp(what, "closeAll")) {
        /* What daemon-style code does: every descriptor above stderr closed, the worker's own too. */
        for (int fd = 3; fd < 1024; fd++) close(fd);
    } else if (!strcmp(what, "mapFile")) {
        /* Reads a 160 MiB file through mmap, 16 MiB every 100 ms: resident file pages, which the
         * kernel takes back when memory is short, not memory the plugin holds. */
        const char *tmp = getenv("TMPDIR");
        char path[4096];
        snprintf(path, sizeof path, "%s/mapped", tmp ? tmp : "/tmp");
        size_t size = (size_t)160 << 20, step = (size_t)16 << 20;
        int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0 || ftruncate(fd, (off_t)size) != 0) { rc = -1; }
        else {
            volatile const char *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
            if (map == MAP_FAILED) { rc = -1; }
            else {
                unsigned long sum = 0;
                for (size_t at = 0; at < size; at += step) {
                    for (size_t i = at; i < at + step; i += 4096) sum += map[i];
                    usleep(100 * 1000);
                }
                rc = (int)(sum & 1);
                munmap((void *)map, size);
            }
        }
        if (fd >= 0) close(fd);
    } else if (!strcmp(what, "forkbomb")) {
        for (;;) { if (fork() == 0) continue; }
    } else if (!strcmp(what, "stdoutFlood")) {
        pthread_t t;
        rc = pthread_create(&t, NULL, stdout_flood, NULL);
    } else if (!strcmp(what, "socketFlood")) {
        pthread_t t;
        rc = pthread_create(&t, NULL, socket_flood, NULL);
    } else if (!strcmp(what, "garbage")) {
        const char *junk = "{this is not json";
        rc = g_host->send(g_host->ctx, (const uint8_t *)junk, strlen(junk));
    } else if (!strcmp(what, "garbageThenReply")) {
        /* A message that is not JSON, then, 200 ms later, the call's answer: the supervisor must
         * act on nothing this worker sends after the violation. */
        const char *junk = "{this is not json";
        rc = g_host->send(g_host->ctx, (const uint8_t *)junk, strlen(junk));
        usleep(200000);
    } else if (!strcmp(what, "logAnyJSON")) {
        /* A log line whose metadata values are JSON of every kind, not only strings. */
        const char *line = "{\"type\":\"log\",\"level\":\"notice\",\"message\":\"metadata of every kind\","
                           "\"metadata\":{\"count\":3,\"ratio\":0.5,\"ok\":true,\"none\":null,\"tags\":[\"a\",1],"
                           "\"where\":{\"file\":\"x.c\",\"line\":7},\"name\":\"plain\",\"plugin\":\"some.other\",\"pid\":1}}";
        rc = g_host->send(g_host->ctx, (const uint8_t *)line, strlen(line));
    } else if (!strcmp(what, "logForged")) {
        /* A message that would start a line of its own, forged in another plugin's name, with a
         * terminal escape, and metadata that would pass for more fields (a value with spaces and
         * `plugin=`, a key with a space and `=`); then one of 100,000 bytes. */
        const char *forged = "{\"type\":\"log\",\"level\":\"notice\",\"message\":\"harmless\\n2026-01-01T00:00:00+0000 error "
                             "supervisor: plugin=other.victim FORGED\\u001b[2K\",\"metadata\":{\"k\\ney\":\"v\\r\","
                             "\"a\":\"1 plugin=other.victim \\\"q\\\"\",\"b c=d\":\"e\",\"empty\":\"\"}}";
        rc = g_host->send(g_host->ctx, (const uint8_t *)forged, strlen(forged));
        size_t n = 100000;
        char *big = malloc(n + 128);
        if (big) {
            size_t at = (size_t)snprintf(big, 128, "{\"type\":\"log\",\"level\":\"notice\",\"message\":\"");
            memset(big + at, 'x', n);
            at += n;
            at += (size_t)snprintf(big + at, 16, "\"}");
            if (rc == 0) rc = g_host->send(g_host->ctx, (const uint8_t *)big, at);
            free(big);
        }
        /* And a line of its stdout that would overwrite its own start on a terminal. */
        dprintf(1, "out harmless\r2026-01-01T00:00:00+0000 error supervisor: FORGED-OUT\x1b[2K\n");
    } else if (!strcmp(what, "giant")) {
        /* Straight onto the protocol socket: a header announcing 2 GiB. */
        unsigned char header[4] = { 0x7f, 0xff, 0xff, 0xff };
        rc = write(3, header, 4);
    } else if (!strcmp(what, "fdsInFlight")) {
        /* Descriptors sent into a socket pair of its own and never read: Linux counts them in
         * flight for the user, which every worker shares. Both ends stay open; as many as the
         * kernel takes (it refuses once this process's RLIMIT_NOFILE is passed). */
        int pair[2];
        rc = socketpair(AF_UNIX, SOCK_STREAM, 0, pair);
        if (rc == 0) {
            int null = open("/dev/null", O_RDONLY);
            int fds[200];
            for (int i = 0; i < 200; i++) fds[i] = null;
            int sent = 0;
            for (int round = 0; round < 10; round++) {
                char byte = 'x';
                struct iovec iov = { &byte, 1 };
                union { char buf[CMSG_SPACE(sizeof fds)]; struct cmsghdr align; } u;
                struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf };
                struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof fds);
                memcpy(CMSG_DATA(c), fds, sizeof fds);
                if (sendmsg(pair[0], &msg, MSG_DONTWAIT) < 0) break;
                sent += 200;
            }
            rc = sent;
        }
    } else if (!strcmp(what, "fds")) {
        /* Lists the open descriptors from 3 to 1024. */
        size_t at = (size_t)snprintf(out, cap, "{\"fds\":[");
        int first = 1;
        for (int fd = 3; fd <= 1024; fd++) {
            if (fcntl(fd, F_GETFD) != -1) {
                at += (size_t)snprintf(out + at, cap - at, "%s%d", first ? "" : ",", fd);
                first = 0;
            }
        }
        snprintf(out + at, cap - at, "]}");
        return;
    } else if (!strcmp(what, "env")) {
        extern char **environ;
        int n = 0;
        for (char **e = environ; *e; e++) n++;
        snprintf(out, cap, "{\"count\":%d,\"home\":%s}", n, getenv("HOME") ? "true" : "false");
        return;
    } else if (!strcmp(what, "writeData")) {
        rc = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (rc >= 0) { if (write((int)rc, "ok", 2) != 2) rc = -1; close((int)rc); }
    }
    snprintf(out, cap, "{\"rc\":%ld,\"errno\":%d}", rc, rc < 0 ? errno : 0);
}

/* The `announce` constructor action: one line in `loads` in the plugin's data folder
   (<home>/data/<identifier>, found from its temporary folder <home>/tmp/<identifier>[@n]) each
   time the library is loaded, so a test can count the loads (a standby worker loads nothing). */
static void announce(void) {
    const char *tmp = getenv("TMPDIR");
    if (!tmp) return;
    char home[4096], id[256];
    snprintf(home, sizeof home, "%s", tmp);
    char *name = strrchr(home, '/');
    if (!name) return;
    snprintf(id, sizeof id, "%s", name + 1);
    char *at = strchr(id, '@');
    if (at) *at = 0;
    *name = 0;
    char *tmpdir = strrchr(home, '/');
    if (!tmpdir) return;
    *tmpdir = 0;
    char path[4608];
    snprintf(path, sizeof path, "%s/data/%s/loads", home, id);
    FILE *out = fopen(path, "a");
    if (!out) return;
    fprintf(out, "loaded\n");
    fclose(out);
    snprintf(ctor_result, sizeof ctor_result, "\"announced\"");
}

/* ctor-action `forgeHello <n>`: before the worker says its own hello, a hello of the plugin's on
 * the worker's socket (descriptor 3) claiming `n` sandbox layers missing. */
static void forge_hello(long n) {
    size_t cap = 256 + (size_t)n * 40;
    char *frame = malloc(cap);
    if (!frame) return;
    size_t at = 4;
    at += (size_t)snprintf(frame + at, cap - at, "{\"type\":\"hello\",\"protocol\":1,\"abi\":%d,\"pid\":%d,\"plugin\":\"f.hello\",\"version\":\"1.0.0\",\"sandbox\":[\"forged\"],\"sandboxMissing\":[",
                           SP_ABI_VERSION, (int)getpid());
    for (long i = 0; i < n; i++) at += (size_t)snprintf(frame + at, cap - at, "%s\"seccomp: FORGED %ld\"", i ? "," : "", i);
    at += (size_t)snprintf(frame + at, cap - at, "]}");
    uint32_t body = (uint32_t)(at - 4);
    frame[0] = (char)(body >> 24); frame[1] = (char)(body >> 16); frame[2] = (char)(body >> 8); frame[3] = (char)body;
    ssize_t rc = write(3, frame, at);
    (void)rc;
    free(frame);
}

__attribute__((constructor)) static void hostile_constructor(void) {
    Dl_info info;
    if (!dladdr((void *)hostile_constructor, &info) || !info.dli_fname) return;
    char path[4096];
    snprintf(path, sizeof path, "%s", info.dli_fname);
    char *slash = strrchr(path, '/');
    if (!slash) return;
    snprintf(slash + 1, sizeof path - (size_t)(slash + 1 - path), "ctor-action");
    FILE *f = fopen(path, "r");
    if (!f) return;
    char what[64] = {0};
    long number = 0;
    if (fscanf(f, "%63s %ld", what, &number) >= 1) {
        if (!strcmp(what, "announce")) announce();
        else if (!strcmp(what, "declareMany")) declare_many = 1;
        else if (!strcmp(what, "forgeHello")) forge_hello(number);
        else attack(what, "/etc/shadow", number, ctor_result, sizeof ctor_result);
    }
    fclose(f);
}

static void reply(unsigned long long id, const char *result) {
    char buf[4608];
    int n = snprintf(buf, sizeof buf, "{\"type\":\"reply\",\"id\":%llu,\"result\":%s}", id, result);
    g_host->send(g_host->ctx, (const uint8_t *)buf, (size_t)n);
}

/* How many `noReply` calls came (read with `noReplies`). */
static int no_replies;
static volatile int block_will_terminate;
static volatile int crash_will_terminate;

/* Calls and streams it sends as raw frames (`callFlood`, `inputFlood`) carry ids from here: their
   answers are counted, not answered. */
#define FLOOD_IDS (1ULL << 42)
static int flood_answers, flood_refused;

/* Sends `count` raw calls to `target`'s `noReply`, or (`chunk` > 0) `count` calls with input,
   each followed by the 16 chunks of `chunk` bytes a caller may send before its reader grants room. */
static void flood(const char *target, long count, long chunk) {
    static unsigned long long next = FLOOD_IDS;
    size_t cap = (size_t)(chunk > 0 ? chunk : 0) + 512;
    char *frame = malloc(cap);
    if (!frame) return;
    for (long i = 0; i < count; i++) {
        unsigned long long id = next++;
        int n = snprintf(frame, cap, "{\"type\":\"call\",\"id\":%llu,\"target\":\"%s\",\"method\":\"noReply\",\"params\":{}%s,\"timeoutMs\":600000}",
                         id, target, chunk > 0 ? ",\"input\":true" : "");
        if (g_host->send(g_host->ctx, (const uint8_t *)frame, (size_t)n) != 0) break;
        for (int seq = 0; chunk > 0 && seq < 16; seq++) {
            size_t at = (size_t)snprintf(frame, cap, "{\"type\":\"chunk\",\"id\":%llu,\"input\":true,\"seq\":%d,\"data\":\"", id, seq);
            memset(frame + at, 'x', (size_t)chunk);
            at += (size_t)chunk;
            at += (size_t)snprintf(frame + at, cap - at, "\"}");
            if (g_host->send(g_host->ctx, (const uint8_t *)frame, at) != 0) break;
        }
    }
    free(frame);
}

static void receive(void *ctx, const uint8_t *bytes, size_t len) {
    (void)ctx;
    const char *json = (const char *)bytes;
    char type[16], method[64], path[512] = "";
    if (!find_string(json, len, "type", type, sizeof type)) return;
    unsigned long long id = (unsigned long long)find_number(json, len, "id", 0);
    if (!strcmp(type, "reply") && id >= FLOOD_IDS) {
        __atomic_add_fetch(&flood_answers, 1, __ATOMIC_RELAXED);
        if (memmem(json, len, "\"unavailable\"", 13)) __atomic_add_fetch(&flood_refused, 1, __ATOMIC_RELAXED);
        return;
    }
    if (strcmp(type, "call") != 0) {
        char name[64];
        if (!strcmp(type, "event") && find_string(json, len, "name", name, sizeof name)) hear("event", name);
        /* After `blockWillTerminate`, its `willTerminate` never returns (a plugin slow to finish). */
        if (block_will_terminate && memmem(json, len, "willTerminate", 13)) for (;;) pause();
        /* After `crashWillTerminate`, its `willTerminate` crashes (a plugin's bug on its way out). */
        if (crash_will_terminate && memmem(json, len, "willTerminate", 13)) raise(SIGSEGV);
        reply(id, "null");
        return;
    }
    find_string(json, len, "method", method, sizeof method);
    hear("call", method);
    if (!strcmp(method, "heard")) {
        char list[sizeof heard + 1];
        snprintf(list, sizeof list, "%.*s]", (int)heard_len, heard);
        reply(id, list);
        return;
    }
    if (!strcmp(method, "ctorResult")) { reply(id, ctor_result); return; }
    /* Holds the worker's I/O thread for `number` ms: what is sent to it meanwhile piles up. */
    if (!strcmp(method, "stall")) { usleep((useconds_t)find_number(json, len, "number", 0) * 1000); reply(id, "null"); return; }
    /* Never answered (a plugin that is slow, or lost the call); its `cancel` is answered like any
       other message above: a late reply (PeerLinkTests). */
    if (!strcmp(method, "noReply")) { no_replies++; return; }
    if (!strcmp(method, "blockWillTerminate")) { block_will_terminate = 1; reply(id, "null"); return; }
    if (!strcmp(method, "crashWillTerminate")) { crash_will_terminate = 1; reply(id, "null"); return; }
    if (!strcmp(method, "breakLinks")) {
        /* Straight onto every socket above the protocol socket, the order channel and the payload
           channel (its peer links): a frame header announcing 2 GiB, which ends each link at its
           other end. */
        unsigned char header[4] = { 0x7f, 0xff, 0xff, 0xff };
        int broken = 0;
        for (int fd = 6; fd < 256; fd++) {
            struct stat st;
            if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) && write(fd, header, 4) == 4) broken++;
        }
        char count[32];
        snprintf(count, sizeof count, "%d", broken);
        reply(id, count);
        return;
    }
    /* Streams that break the rules (StreamTests): 40 chunks at once, ignoring the reader's credit
       of 16; or a first chunk numbered 5; or a chunk for an id the supervisor never used. Each is
       a protocol violation, for which this worker alone is ended. */
    if (!strcmp(method, "streamFlood") || !strcmp(method, "streamBadSeq") || !strcmp(method, "streamStray")) {
        char buf[160];
        int count = !strcmp(method, "streamFlood") ? 40 : 1;
        unsigned long long first = !strcmp(method, "streamBadSeq") ? 5 : 0;
        unsigned long long target = !strcmp(method, "streamStray") ? id + 1000000 : id;
        for (int i = 0; i < count; i++) {
            int n = snprintf(buf, sizeof buf, "{\"type\":\"chunk\",\"id\":%llu,\"seq\":%llu,\"data\":%d}", target, first + i, i);
            g_host->send(g_host->ctx, (const uint8_t *)buf, (size_t)n);
        }
        return;
    }
    /* A chunk's bytes that break the rules (StreamTests): an inline element announced as 10 bytes
       with 5 after the NUL, or an element passed as a memfd (a chunk's bytes travel inline). */
    if (!strcmp(method, "streamBytesShort") || !strcmp(method, "streamBytesFd")) {
        char buf[200];
        int n;
        if (!strcmp(method, "streamBytesShort")) {
            n = snprintf(buf, sizeof buf, "{\"type\":\"chunk\",\"id\":%llu,\"seq\":0,\"data\":{\"$bytes\":0},\"attachments\":[{\"length\":10}]}", id);
            memcpy(buf + n + 1, "12345", 5);
            g_host->send(g_host->ctx, (const uint8_t *)buf, (size_t)n + 6);
        } else {
            static const char data[100000];
            int fd = sp_bytes_create(data, sizeof data);
            n = snprintf(buf, sizeof buf, "{\"type\":\"chunk\",\"id\":%llu,\"seq\":0,\"data\":{\"$bytes\":0},\"attachments\":[{\"length\":100000,\"fd\":%d}]}", id, fd);
            g_host->send(g_host->ctx, (const uint8_t *)buf, (size_t)n);
            close(fd);
        }
        return;
    }
    /* Bytes that break the rules (BytesTests, docs/protocol.md "Bytes"): a memfd left unsealed,
       one sealed but still writable, a socket, a memfd of another length than announced, two
       descriptors for a message that announces one, and one announced that never comes. Each is a
       protocol violation: the worker is ended alone, and the descriptors it sent are closed. */
    if (!strncmp(method, "bytes", 5)) {
        int fd = -1;
        unsigned long long announced = 4096;
        char data[4096];
        memset(data, 'h', sizeof data);
        if (!strcmp(method, "bytesUnsealed") || !strcmp(method, "bytesWritable")) {
            fd = memfd_create("hostile", MFD_CLOEXEC | MFD_ALLOW_SEALING);
            if (write(fd, data, sizeof data) != (ssize_t)sizeof data) { reply(id, "null"); return; }
            if (!strcmp(method, "bytesWritable")) fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW);
        } else if (!strcmp(method, "bytesSocket")) {
            int pair[2];
            socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair);
            fd = pair[0];
        } else if (!strcmp(method, "bytesLength")) {
            fd = sp_bytes_create(data, sizeof data);
            announced = 8192;
        } else if (!strcmp(method, "bytesMore")) {
            /* Straight onto the payload channel (5): two descriptors in one message before the
               worker sends the one the reply announces. */
            int two[2] = { sp_bytes_create(data, sizeof data), sp_bytes_create(data, sizeof data) };
            char byte = 'P';
            struct iovec iov = { &byte, 1 };
            union { struct cmsghdr align; char buf[CMSG_SPACE(2 * sizeof(int))]; } control;
            memset(&control, 0, sizeof control);
            struct msghdr msg = { 0 };
            msg.msg_iov = &iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control.buf;
            msg.msg_controllen = sizeof control.buf;
            struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
            c->cmsg_level = SOL_SOCKET;
            c->cmsg_type = SCM_RIGHTS;
            c->cmsg_len = CMSG_LEN(2 * sizeof(int));
            memcpy(CMSG_DATA(c), two, sizeof two);
            sendmsg(5, &msg, MSG_NOSIGNAL);
            fd = sp_bytes_create(data, sizeof data);
        } else if (!strcmp(method, "bytesMissing")) {
            /* A reply announcing a descriptor, written straight onto the protocol socket (3): none comes. */
            char frame[200];
            int n = snprintf(frame + 4, sizeof frame - 4, "{\"type\":\"reply\",\"id\":%llu,\"result\":{\"$bytes\":0},\"attachments\":[{\"length\":4096,\"fd\":true}]}", id);
            frame[0] = 0; frame[1] = 0; frame[2] = (char)(n >> 8); frame[3] = (char)n;
            if (write(3, frame, (size_t)n + 4) < 0) { /* the worker is ending anyway */ }
            return;
        } else {
            fd = sp_bytes_create(data, sizeof data);
        }
        char head[200];
        int h = snprintf(head, sizeof head, "{\"type\":\"reply\",\"id\":%llu,\"result\":{\"$bytes\":0},\"attachments\":[{\"length\":%llu,\"fd\":%d}]}",
                         id, announced, fd);
        g_host->send(g_host->ctx, (const uint8_t *)head, (size_t)h);
        close(fd);
        return;
    }
    /* Misbehaviours on the protocol socket itself (FaultTests), each ended with its reason or
       refused: a pong made up ahead of the ping it would answer; requests made while the worker
       reads none of its answers; a flood of replies to a call already answered; a length no frame
       can have; log messages too large to decode on the supervisor's loop. */
    if (!strcmp(method, "pongAhead")) {
        char pong[64];
        int n = snprintf(pong, sizeof pong, "{\"type\":\"pong\",\"id\":%llu}", id + 3);
        g_host->send(g_host->ctx, (const uint8_t *)pong, (size_t)n);
        reply(id, "null");
        return;
    }
    if (!strcmp(method, "askWithoutReading")) {
        pthread_t t;
        pthread_create(&t, NULL, ask_without_reading, NULL);
        for (;;) pause();
    }
    if (!strcmp(method, "lateReplyFlood")) {
        reply(id, "null");
        char late[64];
        int n = snprintf(late, sizeof late, "{\"type\":\"reply\",\"id\":%llu,\"result\":0}", id);
        for (int i = 0; i < 1000000; i++) {
            if (g_host->send(g_host->ctx, (const uint8_t *)late, (size_t)n) != 0) break;
        }
        return;
    }
    if (!strcmp(method, "sendHugeLength")) {
        char rc[32];
        snprintf(rc, sizeof rc, "%d", g_host->send(g_host->ctx, (const uint8_t *)"{}", (size_t)-1));
        reply(id, rc);
        return;
    }
    /* `number` log messages and as many stderr lines at once, then nothing more: what the
       supervisor drops over its rates must be told when the second ends, not with a next one. */
    if (!strcmp(method, "logBurst")) {
        long n = find_number(json, len, "number", 1000);
        const char *line = "{\"type\":\"log\",\"level\":\"info\",\"message\":\"burst\"}";
        for (long i = 0; i < n; i++) g_host->send(g_host->ctx, (const uint8_t *)line, strlen(line));
        char *lines = malloc((size_t)n * 5);
        if (lines) {
            for (long i = 0; i < n; i++) memcpy(lines + i * 5, "line\n", 5);
            for (size_t at = 0, all = (size_t)n * 5; at < all;) {
                ssize_t w = write(2, lines + at, all - at);
                if (w <= 0) break;
                at += (size_t)w;
            }
            free(lines);
        }
        reply(id, "null");
        return;
    }
    if (!strcmp(method, "bigLogs")) {
        size_t n = 4u << 20;
        char *big = malloc(n + 128);
        if (big) {
            size_t at = (size_t)snprintf(big, 128, "{\"type\":\"log\",\"level\":\"info\",\"message\":\"");
            for (size_t i = 0; i < n / 2; i++) { big[at++] = '\\'; big[at++] = 'n'; }
            at += (size_t)snprintf(big + at, 16, "\"}");
            for (int i = 0; i < 3; i++) g_host->send(g_host->ctx, (const uint8_t *)big, at);
            free(big);
        }
        usleep(1100 * 1000);
        const char *after = "{\"type\":\"log\",\"level\":\"info\",\"message\":\"after the big logs\"}";
        g_host->send(g_host->ctx, (const uint8_t *)after, strlen(after));
        reply(id, "null");
        return;
    }
    /* A plugin and a dependency that never answers (`noReply`): calls in flight, and input held
       for a reader that grants no room, until the supervisor's limits (OutgoingCalls, HeldInput).
       `floodAnswers`: [answers, of which unavailable]. */
    if (!strcmp(method, "callFlood") || !strcmp(method, "inputFlood")) {
        find_string(json, len, "path", path, sizeof path);
        flood(path, find_number(json, len, "number", 0), !strcmp(method, "inputFlood") ? 1L << 20 : 0);
        reply(id, "null");
        return;
    }
    /* One call to `path`'s `echo`, as a plugin's call goes (over its peer link when it has one);
       its answer counted as the floods' are. */
    if (!strcmp(method, "callEcho")) {
        static unsigned long long next = FLOOD_IDS + (1ULL << 40);
        find_string(json, len, "path", path, sizeof path);
        char frame[768];
        int n = snprintf(frame, sizeof frame, "{\"type\":\"call\",\"id\":%llu,\"target\":\"%s\",\"method\":\"echo\",\"params\":1,\"timeoutMs\":20000}", next++, path);
        reply(id, g_host->send(g_host->ctx, (const uint8_t *)frame, (size_t)n) == 0 ? "true" : "false");
        return;
    }
    if (!strcmp(method, "floodAnswers")) {
        char counts[64];
        snprintf(counts, sizeof counts, "[%d,%d]", __atomic_load_n(&flood_answers, __ATOMIC_RELAXED), __atomic_load_n(&flood_refused, __ATOMIC_RELAXED));
        reply(id, counts);
        return;
    }
    if (!strcmp(method, "noReplies")) {
        char count[32];
        snprintf(count, sizeof count, "%d", no_replies);
        reply(id, count);
        return;
    }
    find_string(json, len, "path", path, sizeof path);
    long number = find_number(json, len, "number", 0);
    char out[4096];
    attack(method, path, number, out, sizeof out);
    reply(id, out);
}

static const sp_plugin plugin = { SP_ABI_VERSION, NULL, receive, NULL };

const sp_plugin *sp_plugin_create(const sp_host *host) {
    g_host = host;
    if (declare_many) {
        size_t cap = 32 + 1024 * 12;
        char *list = malloc(cap);
        if (list) {
            size_t at = (size_t)snprintf(list, cap, "{\"type\":\"idempotent\",\"methods\":[");
            for (int i = 0; i < 1024; i++) at += (size_t)snprintf(list + at, cap - at, "%s\"m%d\"", i ? "," : "", i);
            at += (size_t)snprintf(list + at, cap - at, "]}");
            int first = host->send(host->ctx, (const uint8_t *)list, at);
            const char *more = "{\"type\":\"idempotent\",\"methods\":[\"one-more\"]}";
            int second = host->send(host->ctx, (const uint8_t *)more, strlen(more));
            snprintf(ctor_result, sizeof ctor_result, "[%d,%d]", first, second);
            free(list);
        }
    }
    return &plugin;
}
