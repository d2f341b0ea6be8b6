/* The fork server: starts workers by fork instead of exec (`workerStart: "fork-server"`,
   docs/sandbox.md "The fork server").

     SP_FORKSERVER_LIBRARY=<libPluginWorkerCore.so> SP_FORKSERVER_PARENT=<supervisor pid> plugin-forkserver

   Started by the supervisor with a SOCK_SEQPACKET socket on descriptor 3 (fork_server_protocol.h),
   as `plugin-forkserver` or as a host program's own executable (SP_FORKSERVER_LIBRARY=@program:
   Sources/CProcessRoles diverts it here before its `main`, with the worker's code linked in).
   It loads the worker's library (and with it the Swift runtime, Foundation and libseccomp) once,
   runs none of its code (no Swift code at all: only two of the runtimes' C functions, on a
   short-lived thread, to find the thread ids they keep; thread_ids.c), and stays single-threaded; for
   each request it checks it still has one thread, forks, and the child becomes the worker: its
   descriptors and environment set as an exec would have, then `sp_worker_main`, which applies
   the sandbox and loads the plugin exactly as the `plugin-worker` executable does. Each child is
   made the supervisor's own (CLONE_PARENT), so the supervisor waits for it, signals it and sees
   it die through a pidfd as for an exec'd worker.

   It dies with the supervisor (parent death signal, checked against the expected pid, and the end
   of its socket), serves no one else (the socket is an unnamed pair), and holds nothing a worker
   could reach: it is not dumpable and keeps no descriptor but its socket and, while idle, a few
   empty network namespaces it made ahead (below), all closed in every child before its code runs. */
#define _GNU_SOURCE
#include "fork_server.h"
#include "fork_server_protocol.h"
#include "linux_support.h"
#include "thread_ids.h"
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef CLONE_NEWUSER
#define CLONE_NEWUSER 0x10000000
#endif
#ifndef CLONE_NEWPID
#define CLONE_NEWPID 0x20000000
#endif

extern char **environ;

static const int control_fd = 3;
/* This process's command line (argv's strings, one block): a worker writes its own name over it. */
static char *cmdline;
static size_t cmdline_len;
/* The environment's pointer array as the kernel laid it out, right after argv's, and how many
   entries it has room for. A worker's environment goes there, not only into `environ`: runtimes
   that find the environment by walking past argv (Go's c-shared runtime) read that array. The
   supervisor starts this server with spare entries for it (SP_FORKSERVER_SLOT). */
static char **initial_env;
static size_t initial_env_slots;
typedef sp_worker_entry worker_entry;

/* ---- empty network namespaces, made ahead ----

   Making a network namespace is the dearest single step of a worker's sandbox (~0.45 ms of kernel
   work here: loopback, the protocols' per-namespace state, their sysctl tables). While it has no
   request to serve, this server makes a few (`unshare` and back, with a descriptor kept for
   each), and a request with FS_EMPTY_NETWORK takes one: the server enters it for its `clone`, so
   the child starts there, and returns to its own right after. Each is used once. A server that
   may not make them (no CAP_SYS_ADMIN) keeps none, and its workers make their own. */

enum { NETNS_MAX = 8, NETNS_IDLE_MS = 2 };
static int netns_pool[NETNS_MAX];
static int netns_count;
static int netns_wanted;   /* SP_FORKSERVER_NETNS; 0 once making one failed */
static int host_netns = -1;

/* Where Landlock scopes abstract Unix sockets (ABI 6 and later), one empty network namespace,
   made at the start, serves every worker without `network` instead, and the pool stays empty.
   Such a worker can make no socket at all (seccomp allows it `socketpair` alone), and even a
   socket it could make would be kept by the scope from any other worker's abstract socket: the
   one thing two processes meet through in one network namespace that their mount namespaces and
   Landlock do not already keep apart. Its loopback stays down (the namespace belongs to this
   server's user namespace, in which no worker has a capability). What it saves is a namespace
   made and freed per worker, the kernel's largest share of a worker's start and end
   (`cleanup_net` when many end at once). Without the scope each worker has one of its own. */
static int shared_netns = -1;

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#endif

/* Landlock's ABI version on this kernel (0: none). */
static long landlock_abi(void) {
    long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, 1UL /* LANDLOCK_CREATE_RULESET_VERSION */);
    return abi < 0 ? 0 : abi;
}

/* Makes one; returns its descriptor, or -1 with errno set. */
static int new_empty_netns(void) {
    if (unshare(CLONE_NEWNET) != 0) return -1;
    int fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    int e = errno;
    /* Back to the server's own: it must never fork a worker with `network` into another. */
    if (setns(host_netns, CLONE_NEWNET) != 0) _exit(70);
    errno = e;
    return fd;
}

/* Makes one and keeps it; returns 0 or an errno value. */
static int make_empty_netns(void) {
    int fd = new_empty_netns();
    if (fd < 0) return errno;
    netns_pool[netns_count++] = fd;
    return 0;
}

/* Waits for the next request, making namespaces meanwhile: one after NETNS_IDLE_MS without a
   request (`first`: at once), until it has `netns_wanted`. */
static void fill_netns_while_idle(int first) {
    while (netns_count < netns_wanted) {
        struct pollfd p = { control_fd, POLLIN, 0 };
        int r = poll(&p, 1, first ? 0 : NETNS_IDLE_MS);
        if (r != 0) return;  /* a request (or the end, or an error: receive tells) */
        if (make_empty_netns() != 0) { netns_wanted = 0; return; }
        first = 1;  /* keep going while nothing is asked */
    }
}

/* ---- answers ---- */

static void reply(pid_t pid, int error, int64_t micros, const char *message) {
    char buf[sizeof(struct fs_reply) + FS_MAX_MESSAGE];
    struct fs_reply r = { FS_MAGIC, pid, error, cls_thread_count(), micros };
    memcpy(buf, &r, sizeof r);
    size_t len = message ? strnlen(message, FS_MAX_MESSAGE) : 0;
    if (len) memcpy(buf + sizeof r, message, len);
    ssize_t n;
    do { n = send(control_fd, buf, sizeof r + len, MSG_NOSIGNAL); } while (n < 0 && errno == EINTR);
    /* The supervisor is gone: so is every reason to be here. */
    if (n < 0) _exit(0);
}

/* ---- the child ---- */

struct request {
    uint32_t flags;
    char **env;       /* NULL-terminated, pointing into the request's buffer */
    int fds[6];       /* socket, stdout, stderr, descriptor channel, payload channel, taken page (each or -1) */
};

/* In the child, before any of the worker's code: what an exec would have given it. Returns only
   on failure, with an errno value. */
static int become_worker(const struct request *req, worker_entry entry, void *robust_head, size_t robust_len) {
    /* The kernel starts a child without a robust-mutex list; the C library's fork registers its
       (empty: nothing here holds one) list again, and so does this. */
    syscall(SYS_set_robust_list, robust_head, robust_len);
    /* Default dispositions (this server installs no handler, but says so) and an empty mask. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < _NSIG; sig++) {
        if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &dfl, NULL);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (setsid() < 0) return errno;
    /* Its parent is the supervisor (CLONE_PARENT): it dies with it, as an exec'd worker does. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) return errno;
    /* An exec makes a process dumpable again; the worker needs that to write its own id maps
       and turns it off itself right after (Sandbox step 4). */
    if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0) return errno;
    /* Descriptors: first every source above the targets, then into place (dup2 leaves the copy
       inheritable, as posix_spawn's would be), then nothing else. The control socket (3) is
       written over: a worker can never reach the fork server. */
    int high[6] = { -1, -1, -1, -1, -1, -1 };
    for (int i = 0; i < 6; i++) {
        if (req->fds[i] < 0) continue;
        high[i] = fcntl(req->fds[i], F_DUPFD_CLOEXEC, 16);
        if (high[i] < 0) return errno;
    }
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null < 0) return errno;
    if (dup2(null, 0) < 0 || dup2(high[1], 1) < 0 || dup2(high[2], 2) < 0 || dup2(high[0], 3) < 0) return errno;
    if (high[3] >= 0 && dup2(high[3], 4) < 0) return errno;
    if (high[4] >= 0 && dup2(high[4], 5) < 0) return errno;
    if (high[4] >= 0 && high[3] < 0) close(4);
    if (high[5] >= 0 && dup2(high[5], 6) < 0) return errno;
    if (cls_close_descriptors_from(high[5] >= 0 ? 7 : high[4] >= 0 ? 6 : high[3] >= 0 ? 5 : 4, NULL, 0) < 0) return EBADF;
    size_t n = 0;
    while (req->env[n]) n++;
    for (size_t i = 0; i < n; i++) initial_env[i] = req->env[i];
    initial_env[n] = NULL;
    environ = initial_env;
    /* Named as an exec'd worker would be, in ps and /proc/<pid>/cmdline and comm. */
    memset(cmdline, 0, cmdline_len);
    strncpy(cmdline, "plugin-worker", cmdline_len - 1);
    prctl(PR_SET_NAME, "plugin-worker", 0, 0, 0);
    exit(entry());
}

/* Reads one request: its header, environment and descriptors. Returns 0, or an errno value (the
   descriptors that came are closed then). 1 means the supervisor has gone. */
static int receive(char *buf, struct request *req) {
    union { struct cmsghdr align; char bytes[CMSG_SPACE(6 * sizeof(int))]; } control;
    struct iovec iov = { buf, FS_MAX_REQUEST };
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.bytes, .msg_controllen = sizeof control.bytes };
    ssize_t n;
    do { n = recvmsg(control_fd, &msg, MSG_CMSG_CLOEXEC); } while (n < 0 && errno == EINTR);
    if (n <= 0) return 1;
    int got = 0, received[6] = { -1, -1, -1, -1, -1, -1 };
    for (int i = 0; i < 6; i++) req->fds[i] = -1;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        for (int i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
            if (got < 6) received[got++] = fd; else close(fd);
        }
    }
    struct fs_request h;
    int bad = (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || (size_t)n < sizeof h;
    if (!bad) {
        memcpy(&h, buf, sizeof h);
        int want = 3 + ((h.flags & FS_DESCRIPTOR_CHANNEL) ? 1 : 0) + ((h.flags & FS_PAYLOAD_CHANNEL) ? 1 : 0)
                   + ((h.flags & FS_PAYLOAD_CHANNEL) && (h.flags & FS_TAKEN_PAGE) ? 1 : 0);
        bad = h.magic != FS_MAGIC || got != want || h.env_bytes != (size_t)n - sizeof h || h.env_count > 4096
              || (h.env_bytes > 0 && buf[n - 1] != 0);
    }
    if (bad) {
        for (int i = 0; i < 6; i++) if (received[i] >= 0) close(received[i]);
        return EINVAL;
    }
    /* socket, stdout, stderr, then the channels the flags name, in that order. */
    int next = 3;
    for (int i = 0; i < 3; i++) req->fds[i] = received[i];
    if (h.flags & FS_DESCRIPTOR_CHANNEL) req->fds[3] = received[next++];
    if (h.flags & FS_PAYLOAD_CHANNEL) req->fds[4] = received[next++];
    if ((h.flags & FS_PAYLOAD_CHANNEL) && (h.flags & FS_TAKEN_PAGE)) req->fds[5] = received[next++];
    req->flags = h.flags;
    /* The environment: env_count strings, each NUL-terminated, in the bytes after the header. */
    static char *env[4097];
    char *p = buf + sizeof h, *end = buf + n;
    uint32_t i = 0;
    while (p < end && i < h.env_count) {
        env[i++] = p;
        p += strlen(p) + 1;
    }
    env[i] = NULL;
    req->env = env;
    return 0;
}

static int64_t now_us(void) { return cls_monotonic_us(); }

int sp_fork_server_run(int argc, char **argv, worker_entry builtin) {
    const char *library = getenv("SP_FORKSERVER_LIBRARY"), *parent = getenv("SP_FORKSERVER_PARENT");
    if (!library || !parent || environ != argv + argc + 1) {
        fprintf(stderr, "plugin-forkserver: started by the supervisor only (SP_FORKSERVER_LIBRARY, SP_FORKSERVER_PARENT)\n");
        return 64;
    }
    int in_program = strcmp(library, SP_FORKSERVER_PROGRAM) == 0;
    /* Only the supervisor that started it: dies with it, and refuses to run for another. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) {
        fprintf(stderr, "plugin-forkserver: prctl(PR_SET_PDEATHSIG) failed: %s\n", strerror(errno));
        return 1;
    }
    if (getppid() != (pid_t)atol(parent)) {
        fprintf(stderr, "plugin-forkserver: SP_FORKSERVER_PARENT is %s, but this process's parent is %ld; started by the supervisor only\n",
                parent, (long)getppid());
        return 64;
    }
    prctl(PR_SET_NAME, "plugin-forksrv", 0, 0, 0);
    cmdline = argv[0];
    cmdline_len = strlen(argv[0]) + 1;
    initial_env = environ;
    while (initial_env[initial_env_slots]) initial_env_slots++;
    if (cls_close_descriptors_from(4, NULL, 0) < 0) return 1;
    const char *netns = getenv("SP_FORKSERVER_NETNS");
    netns_wanted = netns ? atoi(netns) : 0;
    if (netns_wanted > NETNS_MAX) netns_wanted = NETNS_MAX;
    if (netns_wanted > 0 && (host_netns = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC)) < 0) netns_wanted = 0;
    if (netns_wanted > 0 && landlock_abi() >= 6 && (shared_netns = new_empty_netns()) >= 0) netns_wanted = 0;

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FS_UNDER_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define FS_UNDER_TSAN 1
#endif
#ifdef FS_UNDER_TSAN
    /* The sanitizer's runtime keeps per-thread state a raw clone does not carry over. */
    reply(getpid(), ENOTSUP, 0, "built with the thread sanitizer, whose state a forked worker would not have: workers are exec'd");
    return 0;
#endif

    void *robust_head = NULL;
    size_t robust_len = 0;
    syscall(SYS_get_robust_list, 0, &robust_head, &robust_len);

    int64_t t0 = now_us();
    /* In a host program's executable the worker's code is loaded already (with the program);
       `plugin-forkserver` loads it now. */
    worker_entry entry = NULL;
    const char *missing = "the worker's code is not linked into this executable";
    if (in_program) {
        entry = builtin;
    } else if (!builtin) {
        void *lib = dlopen(library, RTLD_NOW | RTLD_GLOBAL);
        entry = lib ? (worker_entry)dlsym(lib, "sp_worker_main") : NULL;
        if (!entry) missing = dlerror();
    }
    int64_t preload = now_us() - t0;
    if (!entry) {
        char why[FS_MAX_MESSAGE];
        snprintf(why, sizeof why, "cannot load the worker's code: %s", missing ? missing : "no sp_worker_main");
        reply(getpid(), ENOENT, preload, why);
        return 0;
    }
    /* From here on it holds every worker's code: no one may read or trace it. */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    int threads = cls_thread_count();
    if (threads != 1) {
        char why[FS_MAX_MESSAGE];
        snprintf(why, sizeof why, "loading the worker's code left %d threads; forking is safe only at 1", threads);
        reply(getpid(), EAGAIN, preload, why);
        return 0;
    }
    /* The thread ids kept in memory (above); the second thread has ended when this returns. */
    if (fs_find_thread_ids() != 0) {
        reply(getpid(), EAGAIN, preload, "cannot start a thread to find where the thread ids are kept");
        return 0;
    }
    if (fs_tid_offset < 0) {
        reply(getpid(), ENOTSUP, preload, "cannot find where the C library keeps a thread's id (needed to fork with CLONE_PARENT)");
        return 0;
    }
    reply(getpid(), 0, preload, NULL);

    char *buf = malloc(FS_MAX_REQUEST);
    if (!buf) return 1;
    for (int first = 1;; first = 0) {
        fill_netns_while_idle(first);
        struct request req;
        int rc = receive(buf, &req);
        if (rc == 1) return 0;
        if (rc != 0) { reply(0, rc, 0, "malformed request"); continue; }
        int64_t started = now_us();
        size_t count = 0;
        while (req.env[count]) count++;
        if (count > initial_env_slots) {
            for (int i = 0; i < 6; i++) if (req.fds[i] >= 0) close(req.fds[i]);
            reply(0, E2BIG, 0, "more environment variables than the fork server has room for");
            continue;
        }
        threads = cls_thread_count();
        if (threads != 1) {
            for (int i = 0; i < 6; i++) if (req.fds[i] >= 0) close(req.fds[i]);
            reply(0, EAGAIN, 0, "the fork server has more than one thread: it does not fork");
            continue;
        }
        unsigned long flags = CLONE_PARENT | CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID;
        if (req.flags & FS_ISOLATED) flags |= CLONE_NEWUSER | CLONE_NEWPID;
        /* An empty network namespace made ahead: entered for the clone only. */
        int netfd = -1;
        if ((req.flags & FS_ISOLATED) && (req.flags & FS_EMPTY_NETWORK) && (shared_netns >= 0 || netns_count > 0)) {
            netfd = shared_netns >= 0 ? shared_netns : netns_pool[--netns_count];
            if (setns(netfd, CLONE_NEWNET) != 0) {
                if (netfd != shared_netns) close(netfd);
                netfd = -1;
            }
        }
        fflush(NULL);
        pid_t *ctid = (pid_t *)((char *)pthread_self() + fs_tid_offset);
        /* fork semantics (a copy of this memory, no new stack); the exit signal is inherited from
           this server (SIGCHLD) with CLONE_PARENT. */
        long child = syscall(SYS_clone, flags | SIGCHLD, NULL, NULL, ctid, 0UL);
        if (child != 0 && netfd >= 0) {
            /* Back to its own before anything else (as in make_empty_netns); a namespace of the
               pool belongs to the child alone now (or to nobody, when the clone failed). */
            if (setns(host_netns, CLONE_NEWNET) != 0) _exit(70);
            if (netfd != shared_netns) close(netfd);
        }
        if (child == 0) {
            fs_clear_cached_tids();
            int e = become_worker(&req, entry, robust_head, robust_len);
            /* Say why on its stderr (the supervisor's log), then end. */
            char why[128];
            int len = snprintf(why, sizeof why, "plugin-worker: setting up a forked worker failed: %s\n", strerror(e));
            if (len > 0) { ssize_t w = write(2, why, (size_t)len); (void)w; }
            _exit(127);
        }
        int e = child < 0 ? errno : 0;
        for (int i = 0; i < 6; i++) if (req.fds[i] >= 0) close(req.fds[i]);
        reply(child > 0 ? (pid_t)child : 0, e, now_us() - started, child < 0 ? "clone failed" : NULL);
    }
}
