#define _GNU_SOURCE
#include "linux_support.h"
#include "fork_server_protocol.h"
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <poll.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif
#ifndef P_PIDFD
#define P_PIDFD 3
#endif

int cls_spawn(const char *path, char *const argv[], char *const envp[],
              int socket_fd, int channel_fd, int stdout_fd, int stderr_fd, pid_t *pid, int *pidfd) {
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    int rc = posix_spawn_file_actions_init(&fa);
    if (rc) return rc;
    rc = posix_spawnattr_init(&attr);
    if (rc) { posix_spawn_file_actions_destroy(&fa); return rc; }

    /* The sources are CLOEXEC and numbered above 3 by the caller, so dup2 always makes a fresh,
       inheritable copy. */
    if (!rc) rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (!rc) rc = posix_spawn_file_actions_adddup2(&fa, stdout_fd, 1);
    if (!rc) rc = posix_spawn_file_actions_adddup2(&fa, stderr_fd, 2);
    if (!rc && socket_fd >= 0) rc = posix_spawn_file_actions_adddup2(&fa, socket_fd, 3);
    if (!rc && socket_fd >= 0 && channel_fd >= 0) rc = posix_spawn_file_actions_adddup2(&fa, channel_fd, 4);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    if (!rc) rc = posix_spawn_file_actions_addclosefrom_np(&fa, socket_fd < 0 ? 3 : (channel_fd >= 0 ? 5 : 4));
#endif

    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    sigdelset(&all, SIGKILL);
    sigdelset(&all, SIGSTOP);
    if (!rc) rc = posix_spawnattr_setsigmask(&attr, &none);
    if (!rc) rc = posix_spawnattr_setsigdefault(&attr, &all);
    short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
#ifdef POSIX_SPAWN_SETSID
    flags |= POSIX_SPAWN_SETSID;
#endif
    if (!rc) rc = posix_spawnattr_setflags(&attr, flags);
    if (!rc) rc = posix_spawn(pid, path, &fa, &attr, argv, envp);

    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (rc) return rc;
    long fd = syscall(SYS_pidfd_open, *pid, 0);
    if (fd < 0) {
        int e = errno;
        /* Without a pidfd nobody could wait for it: end and reap it here. */
        kill(*pid, SIGKILL);
        waitpid(*pid, NULL, 0);
        return e;
    }
    /* pidfd_open sets O_CLOEXEC itself (kernel 5.3+). */
    *pidfd = (int)fd;
    return 0;
}

/* ---- spawning into new user, PID and mount namespaces ---- */

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif

struct isolated_spawn {
    const char *path;
    char *const *argv;
    char *const *envp;
    int socket_fd, channel_fd, stdout_fd, stderr_fd;
    int report_fd; /* the write end of a close-on-exec pipe: an errno before the exec */
};

/* Runs in the child, which shares the parent's memory until execve (CLONE_VM | CLONE_VFORK, as
   posix_spawn does): raw system calls only (no allocation, and no libc function a sanitizer's
   interceptor could run in here with the parent's state), nothing of the parent's touched. Not
   instrumented either: a thread sanitizer's function-entry hooks would run on the parent's
   thread state (shared memory) and never be balanced (the child execs). */
#if defined(__has_attribute) && __has_attribute(disable_sanitizer_instrumentation)
__attribute__((disable_sanitizer_instrumentation))
#endif
static int isolated_child(void *p) {
    struct isolated_spawn *a = p;
    /* Default dispositions first (a handler must never run here), then an empty mask. The kernel's
       struct sigaction: handler, flags, restorer, mask; all zero is SIG_DFL. */
    uint64_t dfl[4] = { 0, 0, 0, 0 };
    uint64_t none = 0;
    for (int sig = 1; sig < _NSIG; sig++) {
        if (sig != SIGKILL && sig != SIGSTOP) syscall(SYS_rt_sigaction, sig, dfl, NULL, 8);
    }
    if (syscall(SYS_setsid) < 0) goto fail;
    /* It is in a PID namespace of its own: its parent is invisible (getppid() is 0), so the death
       signal is set here, while the supervisor certainly waits for the exec. */
    if (syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) goto fail;
    /* Its uid is not mapped in its new user namespace yet, so the exec would drop every
       capability it holds there. Three are kept, as ambient capabilities: CAP_SETGID and
       CAP_SETUID (6, 7), to write its id maps after the exec (they cannot be written from here:
       this child shares the supervisor's memory, which is not dumpable, so its /proc/self files
       belong to root), and CAP_SYS_ADMIN (21), to build its mount view and unshare the rest. The
       worker drops every capability before its plugin loads. */
    struct { uint32_t version; int pid; } header = { 0x20080522 /* _LINUX_CAPABILITY_VERSION_3 */, 0 };
    struct { uint32_t effective, permitted, inheritable; } data[2];
    if (syscall(SYS_capget, &header, data) != 0) goto fail;
    data[0].inheritable |= (1U << 6) | (1U << 7) | (1U << 21);
    if (syscall(SYS_capset, &header, data) != 0) goto fail;
    if (syscall(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, 6, 0, 0) != 0) goto fail;
    if (syscall(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, 7, 0, 0) != 0) goto fail;
    if (syscall(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, 21, 0, 0) != 0) goto fail;
    long null = syscall(SYS_openat, AT_FDCWD, "/dev/null", O_RDONLY | O_CLOEXEC);
    /* dup3: the sources are all above 4, never equal to their targets. */
    if (null < 0 || syscall(SYS_dup3, (int)null, 0, 0) < 0) goto fail;
    if (syscall(SYS_dup3, a->stdout_fd, 1, 0) < 0 || syscall(SYS_dup3, a->stderr_fd, 2, 0) < 0 ||
        syscall(SYS_dup3, a->socket_fd, 3, 0) < 0) goto fail;
    if (a->channel_fd >= 0 && syscall(SYS_dup3, a->channel_fd, 4, 0) < 0) goto fail;
    /* Everything above 3 (4) goes, but the report pipe, which closes itself at the exec. */
    unsigned first = a->channel_fd >= 0 ? 5U : 4U;
    if (a->report_fd > (int)first) syscall(SYS_close_range, first, (unsigned)a->report_fd - 1, 0);
    syscall(SYS_close_range, (unsigned)(a->report_fd >= (int)first ? a->report_fd + 1 : (int)first), ~0U, 0);
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, NULL, 8);
    syscall(SYS_execve, a->path, a->argv, a->envp);
fail:;
    int e = errno ? errno : EINVAL;
    syscall(SYS_write, a->report_fd, &e, sizeof e);
    syscall(SYS_exit_group, 127);
    return 127;
}

/* glibc's clone itself: a sanitizer's interceptor of `clone` treats every clone as a fork and
   breaks on one that shares memory (CLONE_VM). */
typedef int (*clone_fn)(int (*)(void *), void *, int, void *, ...);
static clone_fn real_clone(void) {
    static clone_fn fn;
    if (!fn) {
        fn = (clone_fn)dlsym(RTLD_NEXT, "clone");
        if (!fn) fn = clone;
    }
    return fn;
}

int cls_spawn_isolated(const char *path, char *const argv[], char *const envp[],
                       int socket_fd, int channel_fd, int stdout_fd, int stderr_fd, pid_t *pid, int *pidfd) {
    int report[2];
    if (pipe2(report, O_CLOEXEC) != 0) return errno;
    /* Above every descriptor the child keeps (0-4). */
    if (report[1] <= 4) {
        int moved = fcntl(report[1], F_DUPFD_CLOEXEC, 5);
        close(report[1]);
        if (moved < 0) { close(report[0]); return errno; }
        report[1] = moved;
    }
    struct isolated_spawn a = { path, argv, envp, socket_fd, channel_fd, stdout_fd, stderr_fd, report[1] };
    size_t stack_size = 64 * 1024;
    char *stack = malloc(stack_size);
    if (!stack) { close(report[0]); close(report[1]); return ENOMEM; }
    /* No handler of the parent's may run on the child's stack: everything blocked across clone. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int fd = -1;
    /* No CLONE_NEWNS: copying the mount table waits for the global namespace lock, which other
       workers' mount views hold; the worker unshares its mount namespace itself, off the
       supervisor's thread (it holds CAP_SYS_ADMIN in its user namespace for that). */
    int flags = CLONE_VM | CLONE_VFORK | CLONE_PIDFD | CLONE_NEWUSER | CLONE_NEWPID | SIGCHLD;
    pid_t child = real_clone()(isolated_child, stack + stack_size, flags, &a, &fd);
    int e = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    free(stack);
    close(report[1]);
    if (child < 0) { close(report[0]); return e; }
    /* CLONE_VFORK: the child has exec'd (the pipe closed) or failed (it wrote why). */
    int failed = 0;
    ssize_t n;
    do { n = read(report[0], &failed, sizeof failed); } while (n < 0 && errno == EINTR);
    close(report[0]);
    if (n == (ssize_t)sizeof failed) {
        siginfo_t info;
        waitid(P_PIDFD, (id_t)fd, &info, WEXITED);
        close(fd);
        return failed ? failed : EINVAL;
    }
    *pid = child;
    *pidfd = fd;
    return 0;
}

int cls_pidfd_wait(int pidfd, int nohang, int *code, int *signaled, long *max_rss_kb, long long *cpu_us) {
    siginfo_t info;
    struct rusage usage;
    for (;;) {
        memset(&info, 0, sizeof info);
        memset(&usage, 0, sizeof usage);
        /* The raw syscall takes a fifth argument, the rusage glibc's waitid() does not pass on. */
        long rc = syscall(SYS_waitid, P_PIDFD, pidfd, &info, WEXITED | (nohang ? WNOHANG : 0), &usage);
        if (rc == 0) break;
        if (errno != EINTR) return -errno;
    }
    if (info.si_pid == 0) return 0; /* WNOHANG and still running */
    *signaled = (info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED) ? 1 : 0;
    *code = info.si_status;
    *max_rss_kb = usage.ru_maxrss;
    *cpu_us = (long long)usage.ru_utime.tv_sec * 1000000 + usage.ru_utime.tv_usec
            + (long long)usage.ru_stime.tv_sec * 1000000 + usage.ru_stime.tv_usec;
    return 1;
}

int cls_pidfd_signal(int pidfd, int sig) {
    return syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0) == 0 ? 0 : -errno;
}

int cls_epoll_create(void) {
    int fd = epoll_create1(EPOLL_CLOEXEC);
    return fd >= 0 ? fd : -errno;
}

int cls_epoll_add(int epfd, int fd) {
    struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };
    return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == 0 ? 0 : -errno;
}

int cls_epoll_remove(int epfd, int fd) {
    return epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL) == 0 ? 0 : -errno;
}

int cls_epoll_wait(int epfd, int *fds, int max) {
    struct epoll_event events[32];
    if (max > 32) max = 32;
    int n;
    do { n = epoll_wait(epfd, events, max, -1); } while (n < 0 && errno == EINTR);
    if (n < 0) return -errno;
    for (int i = 0; i < n; i++) fds[i] = events[i].data.fd;
    return n;
}

void cls_set_thread_name(const char *name) {
    char short_name[16];
    strncpy(short_name, name, 15);
    short_name[15] = 0;
    pthread_setname_np(pthread_self(), short_name);
}

int cls_pipe_cloexec(int fds[2]) {
    return pipe2(fds, O_CLOEXEC) == 0 ? 0 : -errno;
}

int cls_set_parent_death_signal(int sig) {
    return prctl(PR_SET_PDEATHSIG, (unsigned long)sig, 0, 0, 0) == 0 ? 0 : -errno;
}

int cls_set_no_new_privs(void) {
    return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 ? 0 : -errno;
}

int cls_set_not_dumpable(void) {
    return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0 ? 0 : -errno;
}

static int kept(int fd, const int *keep, int n) {
    for (int i = 0; i < n; i++) if (keep[i] == fd) return 1;
    return 0;
}

int cls_close_descriptors_from(int first, const int *keep, int n) {
    /* close_range(2) over the gaps between the kept descriptors when the kernel has it, else a
       walk of /proc/self/fd. */
    int ok = 1, start = first;
    for (;;) {
        int next = -1; /* the smallest kept descriptor at or above start */
        for (int i = 0; i < n; i++) if (keep[i] >= start && (next < 0 || keep[i] < next)) next = keep[i];
        if (next < 0) {
            if (syscall(SYS_close_range, (unsigned)start, ~0U, 0) != 0) ok = 0;
            break;
        }
        if (next > start && syscall(SYS_close_range, (unsigned)start, (unsigned)(next - 1), 0) != 0) { ok = 0; break; }
        start = next + 1;
    }
    if (ok) return 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -errno;
    int dfd = dirfd(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        if (fd >= first && fd != dfd && !kept(fd, keep, n)) close(fd);
    }
    closedir(d);
    return 0;
}

int64_t cls_monotonic_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t cls_monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Cached per thread: under the worker's seccomp filter every syscall costs a filter run, and the
   send lock asks for the id on every frame. */
static __thread int32_t cached_tid;

int32_t cls_thread_id(void) {
    if (!cached_tid) cached_tid = (int32_t)syscall(SYS_gettid);
    return cached_tid;
}

int cls_thread_count(void) {
    char buf[1024];
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    int e = errno;
    close(fd);
    if (n <= 0) return n < 0 ? -e : -EIO;
    buf[n] = 0;
    /* Fields after the command name (which may hold spaces) start after the last ')'. */
    char *p = strrchr(buf, ')');
    if (!p) return -EIO;
    int field = 2;
    for (; *p && field < 20; p++) if (*p == ' ') field++;
    return atoi(p);
}

static void lifecycle_set(sigset_t *set) {
    sigemptyset(set);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGUSR1);
    sigaddset(set, SIGTSTP);
    sigaddset(set, SIGCONT);
    sigaddset(set, SIGHUP);
}

int cls_block_lifecycle_signals(void) {
    sigset_t set;
    lifecycle_set(&set);
    signal(SIGPIPE, SIG_IGN);
    int rc = pthread_sigmask(SIG_BLOCK, &set, NULL);
    return rc == 0 ? 0 : -rc;
}

int cls_wait_lifecycle_signal(void) {
    sigset_t set;
    lifecycle_set(&set);
    for (;;) {
        int sig = sigwaitinfo(&set, NULL);
        if (sig >= 0) return sig;
        if (errno != EINTR) return -errno;
    }
}

const char *cls_signal_name(int sig) {
    switch (sig) {
    case SIGHUP: return "SIGHUP"; case SIGINT: return "SIGINT"; case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL"; case SIGTRAP: return "SIGTRAP"; case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS"; case SIGFPE: return "SIGFPE"; case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1"; case SIGSEGV: return "SIGSEGV"; case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE"; case SIGALRM: return "SIGALRM"; case SIGTERM: return "SIGTERM";
    case SIGCHLD: return "SIGCHLD"; case SIGCONT: return "SIGCONT"; case SIGSTOP: return "SIGSTOP";
    case SIGTSTP: return "SIGTSTP"; case SIGTTIN: return "SIGTTIN"; case SIGTTOU: return "SIGTTOU";
    case SIGXCPU: return "SIGXCPU"; case SIGXFSZ: return "SIGXFSZ"; case SIGSYS: return "SIGSYS";
    default: return NULL;
    }
}

#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

int cls_exchange(const char *a, const char *b) {
    return syscall(SYS_renameat2, AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) == 0 ? 0 : -errno;
}

int cls_fsync_path(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    int rc = fsync(fd) == 0 ? 0 : -errno;
    close(fd);
    return rc;
}

int cls_landlock_abi(void) {
#ifndef __NR_landlock_create_ruleset
#define __NR_landlock_create_ruleset 444
#endif
    long abi = syscall(__NR_landlock_create_ruleset, NULL, 0, 1U /* LANDLOCK_CREATE_RULESET_VERSION */);
    return abi >= 0 ? (int)abi : -errno;
}

/* ---- send lock (Drepper's futex mutex, "Futexes Are Tricky", mutex3) ---- */

static long futex(int32_t *word, int op, int32_t value, const struct timespec *timeout) {
    return syscall(SYS_futex, word, op | FUTEX_PRIVATE_FLAG, value, timeout, NULL, 0);
}

void cls_send_lock_acquire(cls_send_lock *lock) {
    int32_t c = 0;
    if (!__atomic_compare_exchange_n(&lock->state, &c, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
        if (c != 2) c = __atomic_exchange_n(&lock->state, 2, __ATOMIC_ACQUIRE);
        while (c != 0) {
            futex(&lock->state, FUTEX_WAIT, 2, NULL);
            c = __atomic_exchange_n(&lock->state, 2, __ATOMIC_ACQUIRE);
        }
    }
    __atomic_store_n(&lock->owner, cls_thread_id(), __ATOMIC_RELAXED);
}

void cls_send_lock_release(cls_send_lock *lock) {
    __atomic_store_n(&lock->owner, 0, __ATOMIC_RELAXED);
    if (__atomic_fetch_sub(&lock->state, 1, __ATOMIC_RELEASE) != 1) {
        __atomic_store_n(&lock->state, 0, __ATOMIC_RELEASE);
        futex(&lock->state, FUTEX_WAKE, 1, NULL);
    }
}

int cls_send_lock_acquire_from_signal(cls_send_lock *lock, int timeout_ms) {
    int32_t me = cls_thread_id();
    if (__atomic_load_n(&lock->owner, __ATOMIC_RELAXED) == me) return 0;
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        int32_t c = 0;
        if (__atomic_compare_exchange_n(&lock->state, &c, 2, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
            __atomic_store_n(&lock->owner, me, __ATOMIC_RELAXED);
            return 1;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        long elapsed = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
        if (elapsed >= timeout_ms) return 0;
        struct timespec wait = { 0, 1000000 };
        futex(&lock->state, FUTEX_WAIT, c == 0 ? 1 : c, &wait);
    }
}

int cls_send_lock_hold(cls_send_lock *lock, const void *a, size_t a_len, const void *b, size_t b_len) {
    size_t need = lock->held_len + a_len + b_len;
    if (need > lock->held_capacity) {
        size_t capacity = lock->held_capacity ? lock->held_capacity : 4096;
        while (capacity < need) capacity *= 2;
        uint8_t *grown = realloc(lock->held, capacity);
        if (!grown) return -ENOMEM;
        lock->held = grown;
        lock->held_capacity = capacity;
    }
    if (a_len) memcpy(lock->held + lock->held_len, a, a_len);
    if (b_len) memcpy(lock->held + lock->held_len + a_len, b, b_len);
    lock->held_len = need;
    return 0;
}

int cls_send_all(int fd, const void *bytes, size_t len) {
    size_t off = 0;
    while (off < len) {
        ssize_t w = send(fd, (const char *)bytes + off, len - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        off += (size_t)w;
    }
    return 0;
}

void cls_send_lock_write_held(cls_send_lock *lock, int fd) {
    cls_send_all(fd, lock->held, lock->held_len);
    lock->held_len = 0;
}

void cls_send_lock_free_held(cls_send_lock *lock) {
    free(lock->held);
    lock->held = NULL;
    lock->held_len = lock->held_capacity = 0;
}

static cls_send_lock *exit_lock = NULL;
static int exit_fd = -1;

static void flush_held_at_exit(void) {
    if (!exit_lock || exit_fd < 0 || !cls_send_lock_acquire_from_signal(exit_lock, 500)) return;
    cls_send_lock_write_held(exit_lock, exit_fd);
    cls_send_lock_release(exit_lock);
}

void cls_send_lock_flush_at_exit(cls_send_lock *lock, int fd) {
    int first = exit_lock == NULL;
    exit_lock = lock;
    exit_fd = fd;
    if (first) atexit(flush_held_at_exit);
}

void cls_send_lock_forget_at_exit(cls_send_lock *lock) {
    if (exit_lock == lock) exit_lock = NULL;
}

/* ---- descriptor passing ---- */

/* One sendmsg of `len` bytes with `fd` attached unless it is -1, retried on EINTR. */
static long send_with_fd(int sock, int fd, const void *data, size_t len, int flags) {
    struct iovec iov = { (void *)data, len };
    union { struct cmsghdr align; char buf[CMSG_SPACE(sizeof(int))]; } control;
    memset(&control, 0, sizeof control);
    struct msghdr msg = { 0 };
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (fd >= 0) {
        msg.msg_control = control.buf;
        msg.msg_controllen = sizeof control.buf;
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    for (;;) {
        ssize_t n = sendmsg(sock, &msg, MSG_NOSIGNAL | flags);
        if (n >= 0) return (long)n;
        if (errno != EINTR) return -errno;
    }
}

/* One recvmsg of up to `len` bytes (retried on EINTR); *fd: the descriptor attached, else -1. */
static long receive_with_fd(int sock, void *data, size_t len, int *fd, int flags) {
    *fd = -1;
    struct iovec iov = { data, len };
    union { struct cmsghdr align; char buf[CMSG_SPACE(sizeof(int))]; } control;
    struct msghdr msg = { 0 };
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.buf;
    msg.msg_controllen = sizeof control.buf;
    ssize_t n;
    do { n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | flags); } while (n < 0 && errno == EINTR);
    if (n < 0) return -errno;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(sizeof(int))) {
            memcpy(fd, CMSG_DATA(c), sizeof(int));
        }
    }
    return (long)n;
}

int cls_send_fd(int sock, int fd) {
    char byte = 'L';
    long n = send_with_fd(sock, fd, &byte, 1, 0);
    return n == 1 ? 0 : (n < 0 ? (int)n : -EIO);
}

int cls_receive_fd(int sock, int *fd) {
    char byte;
    long n = receive_with_fd(sock, &byte, 1, fd, MSG_DONTWAIT);
    if (n <= 0) return (int)n;
    return *fd >= 0 ? 1 : -EBADMSG; /* a byte without a descriptor: not what a worker sends */
}

long cls_send_with_fd(int sock, int fd, const void *data, size_t len) {
    return send_with_fd(sock, fd, data, len, MSG_DONTWAIT);
}

long cls_receive_with_fd(int sock, void *data, size_t len, int *fd) {
    return receive_with_fd(sock, data, len, fd, 0);
}

int cls_wake_fd(void) {
    int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    return fd < 0 ? -errno : fd;
}

/* ---- seccomp user notification (the supervisor's side) ---- */

int cls_seccomp_listener_state(int fd) {
    struct pollfd p = { fd, POLLIN, 0 };
    int n;
    do { n = poll(&p, 1, 0); } while (n < 0 && errno == EINTR);
    if (n < 0) return -errno;
    if (p.revents & POLLIN) return 1;
    if (p.revents & (POLLHUP | POLLERR | POLLNVAL)) return -EPIPE;
    return 0;
}

int cls_seccomp_receive(int fd, cls_seccomp_notification *out) {
    static __thread struct seccomp_notif *buffer;
    static __thread size_t size;
    if (!buffer) {
        struct seccomp_notif_sizes sizes;
        if (syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sizes) != 0) return -errno;
        size = sizes.seccomp_notif > sizeof(struct seccomp_notif) ? sizes.seccomp_notif : sizeof(struct seccomp_notif);
        buffer = calloc(1, size);
        if (!buffer) return -ENOMEM;
    }
    memset(buffer, 0, size);
    if (ioctl(fd, SECCOMP_IOCTL_NOTIF_RECV, buffer) != 0) return -errno;
    out->id = buffer->id;
    out->pid = buffer->pid;
    out->nr = buffer->data.nr;
    out->arch = buffer->data.arch;
    for (int i = 0; i < 6; i++) out->args[i] = buffer->data.args[i];
    return 0;
}

int cls_seccomp_respond_error(int fd, uint64_t id, int error) {
    struct seccomp_notif_resp resp;
    memset(&resp, 0, sizeof resp);
    resp.id = id;
    resp.error = -error;
    return ioctl(fd, SECCOMP_IOCTL_NOTIF_SEND, &resp) == 0 ? 0 : -errno;
}

/* ---- the fork server's channel (fork_server_protocol.h) ---- */

int cls_seqpacket_pair(int fds[2]) {
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0) return -errno;
    /* Room for the longest request in one message (the kernel may cap it at wmem_max; a spec that
       does not fit is refused with EMSGSIZE and that worker is exec'd). */
    int size = FS_MAX_REQUEST + 4096;
    setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
    setsockopt(fds[1], SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    return 0;
}

int cls_forkserver_read(int sock, int timeout_ms, struct fs_reply *out, char *message, size_t message_len) {
    struct pollfd p = { sock, POLLIN, 0 };
    int64_t deadline = cls_monotonic_us() + (int64_t)timeout_ms * 1000;
    for (;;) {
        int64_t left = (deadline - cls_monotonic_us()) / 1000;
        if (left < 0) return -ETIMEDOUT;
        int rc = poll(&p, 1, (int)left);
        if (rc < 0 && errno == EINTR) continue;
        if (rc < 0) return -errno;
        if (rc == 0) return -ETIMEDOUT;
        break;
    }
    char buf[sizeof(struct fs_reply) + FS_MAX_MESSAGE];
    ssize_t n;
    do { n = recv(sock, buf, sizeof buf, MSG_DONTWAIT); } while (n < 0 && errno == EINTR);
    if (n == 0) return -EPIPE;
    if (n < 0) return -errno;
    if ((size_t)n < sizeof *out) return -EPROTO;
    memcpy(out, buf, sizeof *out);
    if (out->magic != FS_MAGIC) return -EPROTO;
    size_t len = (size_t)n - sizeof *out;
    if (message_len > 0) {
        if (len >= message_len) len = message_len - 1;
        memcpy(message, buf + sizeof *out, len);
        message[len] = 0;
    }
    return 0;
}

int cls_forkserver_spawn(int sock, char *const envp[], int socket_fd, int channel_fd, int stdout_fd, int stderr_fd,
                         int isolated, int empty_network, int timeout_ms, pid_t *pid, int *pidfd, int64_t *fork_us,
                         char *message, size_t message_len) {
    if (message_len > 0) message[0] = 0;
    struct fs_request h = { FS_MAGIC, (isolated ? FS_ISOLATED : 0) | (channel_fd >= 0 ? FS_DESCRIPTOR_CHANNEL : 0) | (empty_network ? FS_EMPTY_NETWORK : 0), 0, 0 };
    size_t bytes = 0;
    for (char *const *e = envp; *e; e++) { bytes += strlen(*e) + 1; h.env_count++; }
    if (bytes + sizeof h > FS_MAX_REQUEST) return EMSGSIZE;
    h.env_bytes = (uint32_t)bytes;
    char *buf = malloc(sizeof h + bytes);
    if (!buf) return ENOMEM;
    memcpy(buf, &h, sizeof h);
    char *p = buf + sizeof h;
    for (char *const *e = envp; *e; e++) { size_t l = strlen(*e) + 1; memcpy(p, *e, l); p += l; }
    int fds[4] = { socket_fd, stdout_fd, stderr_fd, channel_fd };
    int nfds = channel_fd >= 0 ? 4 : 3;
    union { struct cmsghdr align; char bytes[CMSG_SPACE(4 * sizeof(int))]; } control;
    memset(&control, 0, sizeof control);
    struct iovec iov = { buf, sizeof h + bytes };
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.bytes,
                          .msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int)) };
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
    memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
    ssize_t n;
    do { n = sendmsg(sock, &msg, MSG_NOSIGNAL); } while (n < 0 && errno == EINTR);
    int e = errno;
    free(buf);
    /* Too long for the socket: this request only (the channel is fine). */
    if (n < 0) return e == EMSGSIZE || e == ENOBUFS ? e : -e;
    struct fs_reply r;
    int rc = cls_forkserver_read(sock, timeout_ms, &r, message, message_len);
    if (rc < 0) return rc;
    if (fork_us) *fork_us = r.micros;
    if (r.error != 0) return r.error > 0 ? r.error : EINVAL;
    if (r.pid <= 0) return -EPROTO;
    /* The child is ours (CLONE_PARENT) and nobody here waits for "any child": the pid names it
       until we reap it, so the pidfd does too. */
    long fd = syscall(SYS_pidfd_open, r.pid, 0);
    if (fd < 0) {
        int err = errno;
        kill(r.pid, SIGKILL);
        waitpid(r.pid, NULL, 0);
        return err;
    }
    *pid = r.pid;
    *pidfd = (int)fd;
    return 0;
}

struct loaded_objects { char *buf; size_t len, at; };

static int add_loaded_object(struct dl_phdr_info *info, size_t size, void *context) {
    (void)size;
    struct loaded_objects *out = context;
    if (!info->dlpi_name || !info->dlpi_name[0]) return 0;
    size_t n = strlen(info->dlpi_name);
    if (out->at + n + 1 > out->len) return 1;
    memcpy(out->buf + out->at, info->dlpi_name, n);
    out->buf[out->at + n] = '\n';
    out->at += n + 1;
    return 0;
}

size_t cls_loaded_objects(char *buf, size_t len) {
    struct loaded_objects out = { buf, len, 0 };
    dl_iterate_phdr(add_loaded_object, &out);
    return out.at;
}
