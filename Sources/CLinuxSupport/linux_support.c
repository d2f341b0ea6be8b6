#define _GNU_SOURCE
#include "internal.h"
#include <malloc.h>

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

int cls_mask_lifecycle_signals(void) {
    sigset_t set;
    lifecycle_set(&set);
    int rc = pthread_sigmask(SIG_BLOCK, &set, NULL);
    return rc == 0 ? 0 : -rc;
}

int cls_block_lifecycle_signals(void) {
    signal(SIGPIPE, SIG_IGN);
    return cls_mask_lifecycle_signals();
}

int cls_block_signal(int sig) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    int rc = pthread_sigmask(SIG_BLOCK, &set, NULL);
    return rc == 0 ? 0 : -rc;
}

int cls_wait_lifecycle_signal_or(int extra) {
    sigset_t set;
    lifecycle_set(&set);
    if (extra > 0) sigaddset(&set, extra);
    for (;;) {
        int sig = sigwaitinfo(&set, NULL);
        if (sig >= 0) return sig;
        if (errno != EINTR) return -errno;
    }
}

/* The pipe the handler writes caught signals to: the write end non-blocking (a handler must never
   wait; a signal that finds it full is one of 64 Ki unread, dropped as a repeated signal is), the
   read end blocking for the relay. */
static int caught_pipe[2] = { -1, -1 };

static void caught_signal(int sig) {
    int saved = errno;
    unsigned char number = (unsigned char)sig;
    ssize_t n = write(caught_pipe[1], &number, 1);
    (void)n;
    errno = saved;
}

/* Catching is counted: the first catch keeps what the program had for each signal (its own
   handler, SIG_IGN under nohup, the default), and the last release gives it back. */
static pthread_mutex_t caught_lock = PTHREAD_MUTEX_INITIALIZER;
static int caught_count;
static struct sigaction caught_previous[65];

int cls_catch_lifecycle_signals(int extra) {
    pthread_mutex_lock(&caught_lock);
    int rc = 0;
    if (caught_pipe[0] < 0) {
        int fds[2];
        if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0 || fcntl(fds[0], F_SETFL, 0) != 0) rc = -errno;
        else { caught_pipe[0] = fds[0]; caught_pipe[1] = fds[1]; }
    }
    if (rc == 0) {
        struct sigaction action;
        memset(&action, 0, sizeof action);
        action.sa_handler = caught_signal;
        /* The program's system calls the handler interrupts go on (SA_RESTART); one signal at a
           time runs it on a thread (the set masked while it runs). */
        action.sa_flags = SA_RESTART;
        lifecycle_set(&action.sa_mask);
        if (extra > 0) sigaddset(&action.sa_mask, extra);
        for (int sig = 1; sig < 65 && rc == 0; sig++) {
            if (!sigismember(&action.sa_mask, sig)) continue;
            if (sigaction(sig, &action, caught_count == 0 ? &caught_previous[sig] : NULL) != 0) rc = -errno;
        }
        /* A write to a closed socket or pipe is an error for us, not the end of the process. */
        struct sigaction ignore;
        memset(&ignore, 0, sizeof ignore);
        ignore.sa_handler = SIG_IGN;
        if (rc == 0) sigaction(SIGPIPE, &ignore, caught_count == 0 ? &caught_previous[SIGPIPE] : NULL);
        if (rc == 0) caught_count++;
    }
    pthread_mutex_unlock(&caught_lock);
    return rc;
}

void cls_release_caught_signals(int extra) {
    pthread_mutex_lock(&caught_lock);
    if (caught_count > 0 && --caught_count == 0) {
        sigset_t set;
        lifecycle_set(&set);
        if (extra > 0) sigaddset(&set, extra);
        sigaddset(&set, SIGPIPE);
        for (int sig = 1; sig < 65; sig++) if (sigismember(&set, sig)) sigaction(sig, &caught_previous[sig], NULL);
    }
    /* After the dispositions: nothing the handler writes follows the end. */
    if (caught_pipe[1] >= 0) {
        unsigned char end = 0;
        ssize_t n = write(caught_pipe[1], &end, 1);
        (void)n;
    }
    pthread_mutex_unlock(&caught_lock);
}

/* Commands to the relay, through the pipe behind what the handler wrote (signal numbers are 1-64;
   0 is the release). */
enum { RELAY_PAUSE = 0xFF, RELAY_RESUME = 0xFE };
/* Timed waits on it are on CLOCK_MONOTONIC: a step of the wall clock does not stretch them. */
static pthread_cond_t relay_cond;
static pthread_once_t relay_cond_once = PTHREAD_ONCE_INIT;
static void relay_cond_init(void) {
    pthread_condattr_t attributes;
    pthread_condattr_init(&attributes);
    pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC);
    pthread_cond_init(&relay_cond, &attributes);
    pthread_condattr_destroy(&attributes);
}
/* Under caught_lock: a relay serves (from its first wait until its release; between two waits it
   is passing a signal on, and a pause's byte waits in the pipe for it); it has paused (after the
   pause's byte). */
static int relay_running, relay_paused;

int cls_wait_caught_signal(int extra) {
    pthread_once(&relay_cond_once, relay_cond_init);
    sigset_t set;
    lifecycle_set(&set);
    if (extra > 0) sigaddset(&set, extra);
    pthread_mutex_lock(&caught_lock);
    relay_running = 1;
    int paused = relay_paused;
    pthread_mutex_unlock(&caught_lock);
    /* Paused, this thread blocks them too (it returns no signal while paused, so this is only a
       guard). */
    if (!paused) pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    /* Signals this relay took while paused and raised again (pending once; a repeat is one). */
    unsigned long long raised = 0;
    int rc;
    for (;;) {
        unsigned char number;
        ssize_t n = read(caught_pipe[0], &number, 1);
        if (n < 0 && errno == EINTR) continue;
        if (n != 1) { rc = n < 0 ? -errno : -EIO; break; }
        if (number == 0) { rc = 0; break; }  /* released (cls_release_caught_signals) */
        if (number == RELAY_PAUSE) {
            /* Blocked here too, signals stay pending for the process: across an exec as well. */
            pthread_sigmask(SIG_BLOCK, &set, NULL);
            raised = 0;
            paused = 1;
            pthread_mutex_lock(&caught_lock);
            relay_paused = 1;
            pthread_cond_broadcast(&relay_cond);
            pthread_mutex_unlock(&caught_lock);
            continue;
        }
        if (number == RELAY_RESUME) {
            paused = 0;
            pthread_mutex_lock(&caught_lock);
            relay_paused = 0;
            pthread_mutex_unlock(&caught_lock);
            /* What is pending comes to the handler here now, and through the pipe. */
            pthread_sigmask(SIG_UNBLOCK, &set, NULL);
            continue;
        }
        if (!paused) { rc = number; break; }
        /* Caught before the pause (in the pipe ahead of it) or by a thread that does not block it:
           pending again, once. */
        if (number < 64 && !(raised & (1ULL << number))) {
            raised |= 1ULL << number;
            kill(getpid(), number);
        }
    }
    /* Released, or the pipe failed: no relay serves any more. A signal passed on keeps it serving. */
    if (rc <= 0) {
        pthread_mutex_lock(&caught_lock);
        relay_running = 0;
        pthread_mutex_unlock(&caught_lock);
    }
    return rc;
}

int cls_pause_caught_relay(int timeout_ms) {
    pthread_once(&relay_cond_once, relay_cond_init);
    pthread_mutex_lock(&caught_lock);
    if (!relay_running || caught_pipe[1] < 0) {
        pthread_mutex_unlock(&caught_lock);
        return -ESRCH;
    }
    unsigned char pause = RELAY_PAUSE;
    ssize_t n = write(caught_pipe[1], &pause, 1);
    if (n != 1) {
        pthread_mutex_unlock(&caught_lock);
        return -EAGAIN;
    }
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) { until.tv_sec += 1; until.tv_nsec -= 1000000000L; }
    /* Asked: the relay pauses when it reads the byte, whether or not that is within the wait (a
       resume then follows the pause in the pipe). */
    int rc = 0;
    while (!relay_paused) {
        if (pthread_cond_timedwait(&relay_cond, &caught_lock, &until) == ETIMEDOUT && !relay_paused) { rc = 1; break; }
    }
    pthread_mutex_unlock(&caught_lock);
    return rc;
}

void cls_resume_caught_relay(void) {
    pthread_mutex_lock(&caught_lock);
    if (caught_pipe[1] >= 0) {
        unsigned char resume = RELAY_RESUME;
        ssize_t n = write(caught_pipe[1], &resume, 1);
        (void)n;
    }
    pthread_mutex_unlock(&caught_lock);
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

void cls_trim_memory(void) {
    malloc_trim(0);
}
