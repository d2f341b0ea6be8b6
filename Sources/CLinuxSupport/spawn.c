/* Spawning workers: posix_spawn with a pidfd, the isolated spawn (clone into new user, PID and
 * mount namespaces, then exec), and waiting for and signalling a child by its pidfd. */
#define _GNU_SOURCE
#include "internal.h"

int cls_spawn(const char *path, char *const argv[], char *const envp[],
              int socket_fd, int channel_fd, int payload_fd, int page_fd, int stdout_fd, int stderr_fd, pid_t *pid, int *pidfd) {
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
    if (!rc && socket_fd >= 0 && payload_fd >= 0) rc = posix_spawn_file_actions_adddup2(&fa, payload_fd, 5);
    /* A payload channel without a descriptor channel: nothing stays at 4. */
    if (!rc && socket_fd >= 0 && payload_fd >= 0 && channel_fd < 0) rc = posix_spawn_file_actions_addclose(&fa, 4);
    /* The taken page (a worker's: it has both channels). */
    if (!rc && socket_fd >= 0 && payload_fd >= 0 && page_fd >= 0) rc = posix_spawn_file_actions_adddup2(&fa, page_fd, 6);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    if (!rc) rc = posix_spawn_file_actions_addclosefrom_np(&fa, socket_fd < 0 ? 3 : (payload_fd >= 0 ? (page_fd >= 0 ? 7 : 6) : channel_fd >= 0 ? 5 : 4));
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
    int socket_fd, channel_fd, payload_fd, page_fd, stdout_fd, stderr_fd;
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
    if (a->payload_fd >= 0 && syscall(SYS_dup3, a->payload_fd, 5, 0) < 0) goto fail;
    if (a->payload_fd >= 0 && a->channel_fd < 0) syscall(SYS_close, 4);
    if (a->payload_fd >= 0 && a->page_fd >= 0 && syscall(SYS_dup3, a->page_fd, 6, 0) < 0) goto fail;
    /* Everything above what it keeps (3-6) goes, but the report pipe, which closes itself at the exec. */
    unsigned first = a->payload_fd >= 0 ? (a->page_fd >= 0 ? 7U : 6U) : a->channel_fd >= 0 ? 5U : 4U;
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
                       int socket_fd, int channel_fd, int payload_fd, int page_fd, int stdout_fd, int stderr_fd, pid_t *pid, int *pidfd) {
    int report[2];
    if (pipe2(report, O_CLOEXEC) != 0) return errno;
    /* Above every descriptor the child keeps (0-6). */
    if (report[1] <= 6) {
        int moved = fcntl(report[1], F_DUPFD_CLOEXEC, 7);
        close(report[1]);
        if (moved < 0) { close(report[0]); return errno; }
        report[1] = moved;
    }
    struct isolated_spawn a = { path, argv, envp, socket_fd, channel_fd, payload_fd, page_fd, stdout_fd, stderr_fd, report[1] };
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
