#define _GNU_SOURCE
#include "sandbox_support.h"
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/mount.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
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

int cws_wait_byte(int fd, int timeout_ms) {
    struct pollfd p = { fd, POLLIN, 0 };
    int n;
    do { n = poll(&p, 1, timeout_ms); } while (n < 0 && errno == EINTR);
    if (n != 1) return -1;
    unsigned char byte;
    ssize_t r;
    do { r = recv(fd, &byte, 1, 0); } while (r < 0 && errno == EINTR);
    return r == 1 ? byte : -1;
}

int cws_peer_hung_up(int fd) {
    struct pollfd p = { fd, POLLRDHUP, 0 };
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR)) ? 1 : 0;
}

/* ---- the minimal file-system view (mount namespace) ---- */

static int fail_step(char *what, size_t len, const char *step, const char *path) {
    int e = errno ? errno : EINVAL;
    snprintf(what, len, "%s%s%s", step, path ? " " : "", path ? path : "");
    return -e;
}

/* The folders made (or found) inside the new root by this cws_enter_minimal_root (the worker has
   one thread then), so that each is asked of the kernel once: the view's paths share most of
   their parents (53 mkdir calls instead of 118 for a worker's view here). */
enum { MADE_MAX = 512 };
static char *made_dirs[MADE_MAX];
static int made_count;

static int is_made(const char *path) {
    for (int i = made_count - 1; i >= 0; i--) if (strcmp(made_dirs[i], path) == 0) return 1;
    return 0;
}

static void note_made(const char *path) {
    if (made_count < MADE_MAX && (made_dirs[made_count] = strdup(path)) != NULL) made_count++;
}

static void forget_made(void) {
    while (made_count > 0) free(made_dirs[--made_count]);
}

/* mkdir of `path` unless made already; an existing one is fine. */
static int make_dir(const char *path) {
    if (is_made(path)) return 0;
    if (mkdir(path, 0755) != 0 && errno != EEXIST) return -1;
    note_made(path);
    return 0;
}

/* mkdir -p of the folders above `path` (a path inside the new root). */
static int make_parents(char *path) {
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        int rc = make_dir(path);
        *p = '/';
        if (rc != 0) return -1;
    }
    return 0;
}

/* The flags a read-only remount must keep: in a user namespace the kernel refuses to clear the
   ones the original mount has (nosuid, nodev, noexec, atime flags are locked). */
static unsigned long kept_flags(int fd) {
    struct statvfs sv;
    if (fstatvfs(fd, &sv) != 0) return MS_NOSUID | MS_NODEV;
    unsigned long f = MS_NOSUID | MS_NODEV;
    if (sv.f_flag & ST_NOEXEC) f |= MS_NOEXEC;
    if (sv.f_flag & ST_NOATIME) f |= MS_NOATIME;
    if (sv.f_flag & ST_NODIRATIME) f |= MS_NODIRATIME;
    if (sv.f_flag & ST_RELATIME) f |= MS_RELATIME;
    return f;
}

/* Makes the mount point for the object `fd` (opened O_PATH) at `target` inside the new root:
   its parents, then a folder or an empty file. */
static int make_target(int fd, char *target) {
    struct stat st;
    if (fstat(fd, &st) != 0) return -1;
    if (make_parents(target) != 0) return -1;
    if (S_ISDIR(st.st_mode)) {
        if (make_dir(target) != 0) return -1;
    } else {
        /* O_EXCL: an existing target (a device bound already) is never opened. */
        int f = open(target, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (f < 0 && errno != EEXIST) return -1;
        if (f >= 0) close(f);
    }
    return 0;
}

static int bind_fd(int fd, const char *target) {
    char source[64];
    snprintf(source, sizeof source, "/proc/self/fd/%d", fd);
    return mount(source, target, NULL, MS_BIND | MS_REC, NULL);
}

static int by_length(const void *a, const void *b) {
    size_t la = strlen(*(const char *const *)a), lb = strlen(*(const char *const *)b);
    return la < lb ? -1 : la > lb;
}

/* `path` lies inside `dir` (or is it). */
static int inside(const char *path, const char *dir) {
    size_t n = strlen(dir);
    return strncmp(path, dir, n) == 0 && (path[n] == 0 || path[n] == '/' || (n == 1 && dir[0] == '/'));
}

#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
struct cws_mount_attr { uint64_t attr_set, attr_clr, propagation, userns_fd; };

int cws_enter_minimal_root(const char *const *paths, const int *writable, const char *const *links, int n,
                           const char *scratch, char *what, size_t what_len) {
    enum { MAX_PATHS = 256 };
    if (n > MAX_PATHS) { errno = E2BIG; return fail_step(what, what_len, "too many paths", NULL); }
    forget_made();
    /* Nothing done here may reach the host's mounts. */
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) return fail_step(what, what_len, "making / private", NULL);
    /* Parents before children. A read-only path inside another read-only one is visible through
       it already, and a path under /proc is in the new /proc: neither needs a mount. */
    const char *order[MAX_PATHS];
    const char *link[MAX_PATHS];
    int rw[MAX_PATHS], fds[MAX_PATHS];
    for (int i = 0; i < n; i++) order[i] = paths[i];
    qsort(order, (size_t)n, sizeof order[0], by_length);
    for (int i = 0; i < n; i++) {
        rw[i] = 0;
        link[i] = NULL;
        for (int j = 0; j < n; j++) if (paths[j] == order[i]) { rw[i] = writable[j]; link[i] = links ? links[j] : NULL; }
        fds[i] = -1;
        if (inside(order[i], "/proc")) continue;
        int covered = 0;
        for (int k = 0; k < i && !covered; k++) covered = fds[k] >= 0 && !rw[k] && !rw[i] && inside(order[i], order[k]);
        if (covered || link[i]) continue;
        /* Opened now, through the host's /proc: the tmpfs below may cover where they are. */
        fds[i] = open(order[i], O_PATH | O_CLOEXEC);
    }
    int rc = 0, pivoted = 0;
    char target[4096];
    const char *devices[] = { "/dev/null", "/dev/zero", "/dev/urandom", "/dev/random" };
    enum { DEVICES = sizeof devices / sizeof devices[0] };
    int devfd[DEVICES];
    for (int i = 0; i < DEVICES; i++) devfd[i] = open(devices[i], O_PATH | O_CLOEXEC);
    if (mount("tmpfs", scratch, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m") != 0) {
        rc = fail_step(what, what_len, "mounting the new root on", scratch);
        goto out;
    }
    /* 1. Every mount point and link, while the tmpfs is writable. */
    for (int i = 0; i < n; i++) {
        snprintf(target, sizeof target, "%s%s", scratch, order[i]);
        if (link[i]) {
            /* A folder that is a symbolic link to another listed path (merged /usr: /lib -> usr/lib). */
            if (make_parents(target) != 0 || (symlink(link[i], target) != 0 && errno != EEXIST)) {
                rc = fail_step(what, what_len, "linking", order[i]);
                goto out;
            }
        } else if (fds[i] >= 0 && make_target(fds[i], target) != 0) {
            rc = fail_step(what, what_len, "making a mount point for", order[i]);
            goto out;
        }
    }
    for (int i = 0; i < DEVICES; i++) {
        snprintf(target, sizeof target, "%s%s", scratch, devices[i]);
        if (devfd[i] >= 0 && make_target(devfd[i], target) != 0) { rc = fail_step(what, what_len, "making", devices[i]); goto out; }
    }
    const char *folders[] = { "/dev/shm", "/proc", "/.old" };
    for (size_t i = 0; i < sizeof folders / sizeof folders[0]; i++) {
        snprintf(target, sizeof target, "%s%s", scratch, folders[i]);
        if (make_parents(target) != 0 || make_dir(target) != 0) { rc = fail_step(what, what_len, "mkdir", target); goto out; }
    }
    /* 2. The read-only binds, then the whole tree read-only in one call (mount_setattr, Linux
       5.12; else a remount per bind, keeping the flags the kernel locks in a user namespace). */
    for (int i = 0; i < n; i++) {
        if (fds[i] < 0 || rw[i]) continue;
        snprintf(target, sizeof target, "%s%s", scratch, order[i]);
        if (bind_fd(fds[i], target) != 0) { rc = fail_step(what, what_len, "binding", order[i]); goto out; }
    }
    struct cws_mount_attr ro = { 1 /* MOUNT_ATTR_RDONLY */, 0, 0, 0 };
    if (syscall(SYS_mount_setattr, AT_FDCWD, scratch, 0x8000 /* AT_RECURSIVE */, &ro, sizeof ro) != 0) {
        for (int i = 0; i < n; i++) {
            if (fds[i] < 0 || rw[i]) continue;
            snprintf(target, sizeof target, "%s%s", scratch, order[i]);
            /* Landlock is the wall for writes; a remount the kernel refuses leaves it the only one. */
            (void)mount(NULL, target, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | kept_flags(fds[i]), NULL);
        }
        (void)mount(NULL, scratch, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL);
    }
    /* 3. What may be written: its data and temporary folders, the devices, a private /dev/shm. */
    for (int i = 0; i < n; i++) {
        if (fds[i] < 0 || !rw[i]) continue;
        snprintf(target, sizeof target, "%s%s", scratch, order[i]);
        if (bind_fd(fds[i], target) != 0) { rc = fail_step(what, what_len, "binding", order[i]); goto out; }
    }
    for (int i = 0; i < DEVICES; i++) {
        if (devfd[i] < 0) continue;
        snprintf(target, sizeof target, "%s%s", scratch, devices[i]);
        if (bind_fd(devfd[i], target) != 0) { rc = fail_step(what, what_len, "binding", devices[i]); goto out; }
    }
    snprintf(target, sizeof target, "%s/dev/shm", scratch);
    if (mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=1777,size=64m") != 0) {
        rc = fail_step(what, what_len, "mounting a private /dev/shm", NULL);
        goto out;
    }
    /* 4. /proc of its own PID namespace: no other process is listed. */
    snprintf(target, sizeof target, "%s/proc", scratch);
    if (mount("proc", target, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0) {
        rc = fail_step(what, what_len, "mounting a new /proc", NULL);
        goto out;
    }
    /* 5. Into it; the host's tree goes. */
    snprintf(target, sizeof target, "%s/.old", scratch);
    if (syscall(SYS_pivot_root, scratch, target) != 0) { rc = fail_step(what, what_len, "pivot_root to", scratch); goto out; }
    pivoted = 1;
    if (chdir("/") != 0) { rc = fail_step(what, what_len, "chdir /", NULL); goto out; }
    if (umount2("/.old", MNT_DETACH) != 0) { rc = fail_step(what, what_len, "detaching the old root", NULL); goto out; }
out:
    forget_made();
    for (int i = 0; i < n; i++) if (fds[i] >= 0) close(fds[i]);
    for (int i = 0; i < DEVICES; i++) if (devfd[i] >= 0) close(devfd[i]);
    /* Half-built: uncover what the tmpfs hid, so the worker goes on with the host's view (and
       Landlock), and says the layer is missing. */
    if (rc != 0 && !pivoted) (void)umount2(scratch, MNT_DETACH);
    return rc;
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

/* Sends a frame whose body starts at frame + 4 and ends at frame + at (the length is filled in here).
   Another thread may be half-way through a frame: wait for it (bounded), so the report is never
   spliced into it. If this very thread holds the lock, a frame of its own is half-written and a
   report would corrupt it: then only the exit code tells the supervisor. */
static void send_report(char *frame, size_t at) {
    uint32_t len = (uint32_t)(at - 4);
    frame[0] = (char)(len >> 24); frame[1] = (char)(len >> 16); frame[2] = (char)(len >> 8); frame[3] = (char)len;
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

