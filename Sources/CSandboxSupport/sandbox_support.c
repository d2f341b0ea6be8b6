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

int cws_landlock_allow_path(int ruleset, const char *path, uint64_t access, uint64_t file_access, int *opened) {
    *opened = 0;
    int fd = open(path, O_PATH | O_CLOEXEC);
    if (fd < 0) return -errno;
    *opened = 1;
    /* What it is, from the descriptor: one walk of the path, not a stat and an open. */
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    if (!S_ISDIR(st.st_mode)) access &= file_access;
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
