#define _GNU_SOURCE
#include "sandbox_support.h"
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

#ifndef __NR_landlock_create_ruleset
#define __NR_landlock_create_ruleset 444
#define __NR_landlock_add_rule 445
#define __NR_landlock_restrict_self 446
#endif

struct cws_ruleset_attr {
    uint64_t handled_access_fs;
    uint64_t handled_access_net;
    uint64_t scoped;
};

struct cws_path_beneath_attr {
    uint64_t allowed_access;
    int32_t parent_fd;
} __attribute__((packed));

int cws_landlock_create(uint64_t handled_fs, uint64_t handled_net, uint64_t scoped) {
    struct cws_ruleset_attr attr = { handled_fs, handled_net, scoped };
    size_t size = scoped ? sizeof attr : (handled_net ? 2 * sizeof(uint64_t) : sizeof(uint64_t));
    long fd = syscall(__NR_landlock_create_ruleset, &attr, size, 0U);
    return fd >= 0 ? (int)fd : -errno;
}

int cws_landlock_allow_path(int ruleset, const char *path, uint64_t access) {
    int fd = open(path, O_PATH | O_CLOEXEC);
    if (fd < 0) return -errno;
    struct cws_path_beneath_attr attr = { access, fd };
    long rc = syscall(__NR_landlock_add_rule, ruleset, 1 /* LANDLOCK_RULE_PATH_BENEATH */, &attr, 0U);
    int err = rc == 0 ? 0 : -errno;
    close(fd);
    return err;
}

int cws_landlock_restrict(int ruleset) {
    long rc = syscall(__NR_landlock_restrict_self, ruleset, 0U);
    int err = rc == 0 ? 0 : -errno;
    close(ruleset);
    return err;
}

int cws_unshare(int flags) {
    return unshare(flags) == 0 ? 0 : -errno;
}

static int write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    ssize_t n = write(fd, text, strlen(text));
    int err = n == (ssize_t)strlen(text) ? 0 : -errno;
    close(fd);
    return err;
}

int cws_map_ids(uid_t uid, gid_t gid) {
    char line[64];
    int rc = write_file("/proc/self/setgroups", "deny");
    if (rc && rc != -ENOENT) return rc;
    snprintf(line, sizeof line, "%u %u 1\n", (unsigned)uid, (unsigned)uid);
    if ((rc = write_file("/proc/self/uid_map", line))) return rc;
    snprintf(line, sizeof line, "%u %u 1\n", (unsigned)gid, (unsigned)gid);
    return write_file("/proc/self/gid_map", line);
}

int cws_drop_capabilities(void) {
    for (int cap = 0; cap <= 63; cap++) {
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL && errno != EPERM) return -errno;
    }
    struct __user_cap_header_struct header = { _LINUX_CAPABILITY_VERSION_3, 0 };
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof data);
    return syscall(SYS_capset, &header, data) == 0 ? 0 : -errno;
}

int cws_set_rlimit(int resource, uint64_t value) {
    struct rlimit rl = { (rlim_t)value, (rlim_t)value };
    struct rlimit current;
    if (getrlimit(resource, &current) == 0 && current.rlim_max != RLIM_INFINITY && current.rlim_max < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max = current.rlim_max; /* never try to raise a hard limit */
    }
    return setrlimit(resource, &rl) == 0 ? 0 : -errno;
}

uint64_t cws_get_rlimit_max(int resource) {
    struct rlimit rl;
    return getrlimit(resource, &rl) == 0 ? (uint64_t)rl.rlim_max : 0;
}

int cws_seccomp_install(const void *insns, unsigned count, int listener) {
    struct sock_fprog prog = { (unsigned short)count, (struct sock_filter *)insns };
    if (count == 0 || count > 0xFFFF) return -EINVAL;
    unsigned long flags = SECCOMP_FILTER_FLAG_TSYNC;
    if (listener) flags |= SECCOMP_FILTER_FLAG_NEW_LISTENER | SECCOMP_FILTER_FLAG_TSYNC_ESRCH;
    long rc = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog);
    if (rc < 0) return -errno;
    /* Without TSYNC_ESRCH a positive value would be a thread that could not be synchronised. */
    if (!listener && rc != 0) return -ESRCH;
    return (int)rc;
}

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
    char frame[512];
    size_t at = 4;
    at = append(frame, at, sizeof frame, "{\"type\":\"exit\",\"reason\":\"sandboxViolation\",\"syscall\":\"");
    at = append(frame, at, sizeof frame, name);
    at = append(frame, at, sizeof frame, "\",\"message\":\"the sandbox denied the system call ");
    at = append(frame, at, sizeof frame, name);
    at = append(frame, at, sizeof frame, "\"}");
    uint32_t len = (uint32_t)(at - 4);
    frame[0] = (char)(len >> 24); frame[1] = (char)(len >> 16); frame[2] = (char)(len >> 8); frame[3] = (char)len;
    /* Another thread may be half-way through a frame: wait for it (bounded), so the report is never
       spliced into it. If this very thread holds the lock, a frame of its own is half-written and a
       report would corrupt it: then only the exit code (159, SIGSYS) tells the supervisor. */
    if (report_fd >= 0 && (!report_lock || cls_send_lock_acquire_from_signal(report_lock, 500))) {
        size_t off = 0;
        while (off < at) {
            ssize_t w = send(report_fd, frame + off, at - off, MSG_NOSIGNAL);
            if (w <= 0) break;
            off += (size_t)w;
        }
    }
    char line[128];
    size_t ll = append(line, 0, sizeof line, "plugin-worker: sandbox violation: ");
    ll = append(line, ll, sizeof line, name);
    ll = append(line, ll, sizeof line, "\n");
    ssize_t w2 = write(2, line, ll); (void)w2;
    syscall(SYS_exit_group, CWS_SANDBOX_VIOLATION_EXIT);
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

