/* Upgrading the supervisor in place (docs/operations.md "Upgrading the supervisor"): exec of the
 * new binary from the thread that made every child (the main thread: PR_SET_PDEATHSIG fires when
 * the thread that made a child ends, and execve ends every other thread), and the rescue that
 * brings the previous binary back when the new one crashes or stalls before it has taken over. */
#define _GNU_SOURCE
#include "internal.h"
#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

int cls_set_cloexec(int fd, int on) {
    int flags = fcntl(fd, F_GETFD);
    if (flags < 0) return -errno;
    flags = on ? (flags | FD_CLOEXEC) : (flags & ~FD_CLOEXEC);
    return fcntl(fd, F_SETFD, flags) == 0 ? 0 : -errno;
}

/* Every descriptor above stderr but those in `keep` closes at the next exec: what a library
 * opened without O_CLOEXEC (an event loop's epoll instance) would otherwise live on, unused, in
 * every binary an upgrade execs. Returns how many were marked, or -errno. */
int cls_cloexec_all_but(const int *keep, int count) {
    DIR *dir = opendir("/proc/self/fd");
    if (!dir) return -errno;
    int self = dirfd(dir), marked = 0;
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL) {
        if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
        int fd = atoi(entry->d_name), kept = fd <= 2 || fd == self;
        for (int i = 0; i < count && !kept; i++) kept = keep[i] == fd;
        if (kept) continue;
        int flags = fcntl(fd, F_GETFD);
        if (flags >= 0 && !(flags & FD_CLOEXEC) && fcntl(fd, F_SETFD, flags | FD_CLOEXEC) == 0) marked++;
    }
    closedir(dir);
    return marked;
}

int cls_exec_fd(int fd, char *const argv[], char *const envp[]) {
    syscall(SYS_execveat, fd, "", argv, envp, AT_EMPTY_PATH);
    return -errno;
}

/* ---- the rescue ---- */

static int rescue_fd = -1;
static char **rescue_argv;
static char **rescue_envp;
/* The environment slot the reason goes in: "SP_UPGRADE_FAILED=<reason>". */
static char rescue_reason[1024];
static const char reason_prefix[] = "SP_UPGRADE_FAILED=";
static const int fatal_signals[] = { SIGSEGV, SIGBUS, SIGILL, SIGTRAP, SIGABRT, SIGFPE, SIGSYS };
#define RESCUE_TRAMPOLINE (SIGRTMIN + 5)

static char **copy_strings(char *const list[], int extra) {
    int n = 0;
    while (list[n]) n++;
    char **out = calloc((size_t)(n + extra + 1), sizeof(char *));
    if (!out) return NULL;
    for (int i = 0; i < n; i++) {
        out[i] = strdup(list[i]);
        if (!out[i]) return NULL;
    }
    return out;
}

static void append(char **at, const char *text) {
    while (*text && *at < rescue_reason + sizeof rescue_reason - 1) *(*at)++ = *text++;
}

static void append_number(char **at, int value) {
    char digits[12];
    int n = 0;
    if (value < 0) value = -value;
    do { digits[n++] = (char)('0' + value % 10); value /= 10; } while (value && n < 11);
    while (n) { char one[2] = { digits[--n], 0 }; append(at, one); }
}

static void set_reason(int sig) {
    char *at = rescue_reason;
    append(&at, reason_prefix);
    if (sig == SIGALRM) {
        append(&at, "the new binary did not take over in time");
    } else {
        append(&at, "the new binary crashed (signal ");
        append_number(&at, sig);
        append(&at, ") before it had taken over");
    }
    *at = 0;
}

static void rescue_exec(void) {
    syscall(SYS_execveat, rescue_fd, "", rescue_argv, rescue_envp, AT_EMPTY_PATH);
    /* Nothing is left to go back to: the process ends, and its workers with it. */
    static const char line[] = "supervisor: the previous binary could not be brought back after a failed upgrade\n";
    ssize_t ignored = write(2, line, sizeof line - 1);
    (void)ignored;
    _exit(70);
}

static void on_trampoline(int sig) {
    (void)sig;
    rescue_exec();
}

static void on_fatal(int sig) {
    if (rescue_reason[0] == 0) set_reason(sig);
    if (syscall(SYS_gettid) == getpid()) rescue_exec();
    /* Another thread: the exec must come from the main thread, which made every worker. */
    syscall(SYS_tgkill, getpid(), getpid(), RESCUE_TRAMPOLINE);
    for (;;) pause();
}

int cls_rescue_arm(int previous_binary, char *const argv[], char *const envp[], unsigned seconds) {
    rescue_argv = copy_strings(argv, 0);
    rescue_envp = copy_strings(envp, 1);
    if (!rescue_argv || !rescue_envp) return -ENOMEM;
    int n = 0;
    while (rescue_envp[n]) n++;
    rescue_envp[n] = rescue_reason;
    rescue_fd = previous_binary;
    struct sigaction action;
    memset(&action, 0, sizeof action);
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_NODEFER;
    action.sa_handler = on_fatal;
    for (size_t i = 0; i < sizeof fatal_signals / sizeof fatal_signals[0]; i++) {
        if (sigaction(fatal_signals[i], &action, NULL) != 0) return -errno;
    }
    if (sigaction(SIGALRM, &action, NULL) != 0) return -errno;
    action.sa_handler = on_trampoline;
    if (sigaction(RESCUE_TRAMPOLINE, &action, NULL) != 0) return -errno;
    sigset_t unblock;
    sigemptyset(&unblock);
    sigaddset(&unblock, SIGALRM);
    sigaddset(&unblock, RESCUE_TRAMPOLINE);
    pthread_sigmask(SIG_UNBLOCK, &unblock, NULL);
    alarm(seconds);
    return 0;
}

int cls_rescue_fire(const char *reason) {
    char *at = rescue_reason;
    append(&at, reason_prefix);
    append(&at, reason);
    *at = 0;
    if (rescue_fd < 0) return -EBADF;
    if (syscall(SYS_gettid) != getpid()) {
        syscall(SYS_tgkill, getpid(), getpid(), RESCUE_TRAMPOLINE);
        for (;;) pause();
    }
    rescue_exec();
    return -errno;
}

void cls_default_fatal_signals(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    sigemptyset(&action.sa_mask);
    action.sa_handler = SIG_DFL;
    sigset_t fatal;
    sigemptyset(&fatal);
    for (size_t i = 0; i < sizeof fatal_signals / sizeof fatal_signals[0]; i++) {
        sigaction(fatal_signals[i], &action, NULL);
        sigaddset(&fatal, fatal_signals[i]);
    }
    /* Not blocked either (a mask inherited from whoever started the process): the calling thread,
       and the threads it makes after. */
    pthread_sigmask(SIG_UNBLOCK, &fatal, NULL);
}

void cls_rescue_disarm(void) {
    alarm(0);
    cls_default_fatal_signals();
    struct sigaction action;
    memset(&action, 0, sizeof action);
    sigemptyset(&action.sa_mask);
    action.sa_handler = SIG_DFL;
    sigaction(SIGALRM, &action, NULL);
    rescue_fd = -1;
}

/* SO_COOKIE of a socket (a number no other socket has while the system runs), or 0. */
uint64_t cls_socket_cookie(int fd) {
    uint64_t cookie = 0;
    socklen_t len = sizeof cookie;
    if (getsockopt(fd, SOL_SOCKET, SO_COOKIE, &cookie, &len) != 0) return 0;
    return cookie;
}
