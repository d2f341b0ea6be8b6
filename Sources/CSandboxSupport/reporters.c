/* What a sandboxed process says as it dies: the SIGSYS reporter (a forbidden system call, named)
 * and PID 1's fatal-signal reporter, each writing one `exit` frame under the send lock. Split from
 * sandbox_support.c. */
#define _GNU_SOURCE
#include "sandbox_support.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ---- SIGSYS reporter: everything it touches is prepared before the filter is loaded ---- */
#define CWS_MAX_SYSCALL 512
static char names[CWS_MAX_SYSCALL][32];
static int report_fd = -1;
static cls_send_lock *report_lock = NULL;

void cws_sigsys_set_name(int nr, const char *name) {
    if (nr < 0 || nr >= CWS_MAX_SYSCALL || !name) return;
    strncpy(names[nr], name, sizeof names[nr] - 1);
}

static size_t append(char *buf, size_t at, size_t cap, const char *s) {
    while (*s && at + 1 < cap) buf[at++] = *s++;
    return at;
}

static size_t append_num(char *buf, size_t at, size_t cap, unsigned long v) {
    char digits[24];
    int n = 0;
    do { digits[n++] = (char)('0' + v % 10); v /= 10; } while (v && n < 23);
    while (n && at + 1 < cap) buf[at++] = digits[--n];
    return at;
}

/* Sends a frame whose body starts at frame + 4 and ends at frame + at (the length is filled in here).
   Another thread may be half-way through a frame: wait for it (bounded), so the report is never
   spliced into it. If this very thread holds the lock, a frame of its own is half-written and a
   report would corrupt it: then only the exit code tells the supervisor. */
static void send_report(char *frame, size_t at) {
    uint32_t len = (uint32_t)(at - 4);
    frame[0] = (char)(len >> 24); frame[1] = (char)(len >> 16); frame[2] = (char)(len >> 8); frame[3] = (char)len;
    /* The replies the links thread held back on a peer link first (answered calls over a link). */
    cls_link_hold_flush(100);
    if (report_fd >= 0 && (!report_lock || cls_send_lock_acquire_from_signal(report_lock, 500))) {
        /* Replies the I/O thread held back (answered calls) go before the report: the process
           ends after it. */
        if (report_lock) cls_send_lock_write_held(report_lock, report_fd);
        cls_send_all(report_fd, frame, at);
    }
}

/* {"type":"exit","reason":"<reason>","<key>":"<value>","message":"<message><value>"} in one write. */
static void report_exit(const char *reason, const char *key, const char *value, const char *message) {
    char frame[512];
    size_t at = 4;
    at = append(frame, at, sizeof frame, "{\"type\":\"exit\",\"reason\":\"");
    at = append(frame, at, sizeof frame, reason);
    at = append(frame, at, sizeof frame, "\",\"");
    at = append(frame, at, sizeof frame, key);
    at = append(frame, at, sizeof frame, "\":\"");
    at = append(frame, at, sizeof frame, value);
    at = append(frame, at, sizeof frame, "\",\"message\":\"");
    at = append(frame, at, sizeof frame, message);
    at = append(frame, at, sizeof frame, value);
    at = append(frame, at, sizeof frame, "\"}");
    send_report(frame, at);
}

static void on_sigsys(int sig, siginfo_t *info, void *uctx) {
    (void)sig; (void)uctx;
    char name[64];
    size_t nl = 0;
    int nr = info->si_syscall;
    unsigned arch = info->si_arch;
    if (arch != 0xC000003EU /* AUDIT_ARCH_X86_64 */ && arch != 0xC00000B7U /* AUDIT_ARCH_AARCH64 */) {
        nl = append(name, nl, sizeof name, "foreign-arch:");
        nl = append_num(name, nl, sizeof name, (unsigned long)nr);
    } else if (nr & 0x40000000) {
        nl = append(name, nl, sizeof name, "x32:");
        nl = append_num(name, nl, sizeof name, (unsigned long)(nr & ~0x40000000));
    } else if (nr >= 0 && nr < CWS_MAX_SYSCALL && names[nr][0]) {
        nl = append(name, nl, sizeof name, names[nr]);
    } else {
        nl = append(name, nl, sizeof name, "syscall:");
        nl = append_num(name, nl, sizeof name, (unsigned long)nr);
    }
    name[nl] = 0;

    /* {"type":"exit","reason":"sandboxViolation","syscall":"...","message":"..."} in one write. */
    report_exit("sandboxViolation", "syscall", name, "the sandbox denied the system call ");
    char line[128];
    size_t ll = append(line, 0, sizeof line, "plugin-worker: sandbox violation: ");
    ll = append(line, ll, sizeof line, name);
    ll = append(line, ll, sizeof line, "\n");
    ssize_t w2 = write(2, line, ll); (void)w2;
    syscall(SYS_exit_group, CWS_SANDBOX_VIOLATION_EXIT);
}

/* ---- PID 1's own fatal signals ---- */
static char signal_names[65][16];

static void on_fatal_signal(int sig, siginfo_t *info, void *uctx) {
    (void)info; (void)uctx;
    const char *name = sig > 0 && sig < 65 && signal_names[sig][0] ? signal_names[sig] : "SIG?";
    report_exit("signaled", "signal", name, "ended by ");
    syscall(SYS_exit_group, 128 + sig);
}

int cws_install_fatal_signal_reporter(const int *signals, int count) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fatal_signal;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < count; i++) {
        int sig = signals[i];
        if (sig <= 0 || sig >= 65) continue;
        const char *n = cls_signal_name(sig);
        if (n) strncpy(signal_names[sig], n, sizeof signal_names[sig] - 1);
        if (sigaction(sig, &sa, NULL) != 0) return -errno;
    }
    return 0;
}

int cws_install_sigsys_reporter(int fd, cls_send_lock *lock) {
    report_fd = fd;
    report_lock = lock;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigsys;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    return sigaction(SIGSYS, &sa, NULL) == 0 ? 0 : -errno;
}
