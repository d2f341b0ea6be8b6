/* Descriptors between processes (SCM_RIGHTS, MSG_CTRUNC checked), the wake-up eventfd, and the
 * supervisor's side of a seccomp filter's listener. */
#define _GNU_SOURCE
#include "internal.h"
#include <sys/stat.h>

/* ---- descriptor passing ---- */

/* One sendmsg of `len` bytes with `count` descriptors attached (none for 0), retried on EINTR. */
static long send_fds(int sock, const int *fds, int count, const void *data, size_t len, int flags) {
    if (count < 0 || count > CLS_MAX_PASSED_FDS) return -EINVAL;
    struct iovec iov = { (void *)data, len };
    union { struct cmsghdr align; char buf[CMSG_SPACE(sizeof(int) * CLS_MAX_PASSED_FDS)]; } control;
    memset(&control, 0, sizeof control);
    struct msghdr msg = { 0 };
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (count > 0) {
        msg.msg_control = control.buf;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)count);
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)count);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)count);
    }
    for (;;) {
        ssize_t n = sendmsg(sock, &msg, MSG_NOSIGNAL | flags);
        if (n >= 0) return (long)n;
        if (errno != EINTR) return -errno;
    }
}

/* One sendmsg of `len` bytes with `fd` attached unless it is -1, retried on EINTR. */
static long send_with_fd(int sock, int fd, const void *data, size_t len, int flags) {
    return send_fds(sock, &fd, fd >= 0 ? 1 : 0, data, len, flags);
}

/* One recvmsg of up to `len` bytes (retried on EINTR) with up to `max` descriptors (close-on-exec)
   into `fds`, *count how many came; -EBADMSG when some were dropped (MSG_CTRUNC) or more than
   `max` came: everything that came is closed. */
static long receive_fds_noting(int sock, void *data, size_t len, int *fds, int max, int *count, int flags, int *truncated);

static long receive_fds(int sock, void *data, size_t len, int *fds, int max, int *count, int flags) {
    return receive_fds_noting(sock, data, len, fds, max, count, flags, NULL);
}

/* As receive_fds; with `truncated`, descriptors dropped for want of room are not an error: the
   bytes that came are returned, with no descriptor (*count 0) and *truncated set. */
static long receive_fds_noting(int sock, void *data, size_t len, int *fds, int max, int *count, int flags, int *truncated) {
    *count = 0;
    if (truncated) *truncated = 0;
    struct iovec iov = { data, len };
    union { struct cmsghdr align; char buf[CMSG_SPACE(sizeof(int) * CLS_MAX_PASSED_FDS)]; } control;
    struct msghdr msg = { 0 };
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.buf;
    msg.msg_controllen = sizeof control.buf;
    ssize_t n;
    do { n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | flags); } while (n < 0 && errno == EINTR);
    if (n < 0) return -errno;
    int got = 0, extra = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        for (int i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + sizeof(int) * (size_t)i, sizeof(int));
            if (got < max) fds[got++] = fd; else { close(fd); extra = 1; }
        }
    }
    /* Descriptors dropped for want of room, or more than expected: not the message that was sent. */
    if ((msg.msg_flags & MSG_CTRUNC) || extra) {
        for (int i = 0; i < got; i++) close(fds[i]);
        if (truncated && (msg.msg_flags & MSG_CTRUNC) && !extra) {
            *truncated = 1;
            return (long)n;
        }
        return -EBADMSG;
    }
    *count = got;
    return (long)n;
}

/* One recvmsg of up to `len` bytes (retried on EINTR); *fd: the descriptor attached, else -1. */
static long receive_with_fd(int sock, void *data, size_t len, int *fd, int flags) {
    int count = 0;
    long n = receive_fds(sock, data, len, fd, 1, &count, flags);
    if (count == 0) *fd = -1;
    return n;
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

const void *cls_find(const void *haystack, size_t length, const void *needle, size_t needle_length) {
    return memmem(haystack, length, needle, needle_length);
}

long cls_send_fds(int sock, const int *fds, int count, const void *data, size_t len) {
    return send_fds(sock, fds, count, data, len, 0);
}

long cls_receive_fds(int sock, void *data, size_t len, int *fds, int max, int *count) {
    return receive_fds(sock, data, len, fds, max, count, MSG_DONTWAIT);
}

long cls_send_fds_now(int sock, const int *fds, int count, const void *data, size_t len) {
    return send_fds(sock, fds, count, data, len, MSG_DONTWAIT);
}

long cls_receive_fds_within(int sock, void *data, size_t len, int *fds, int max, int *count, int timeout_ms) {
    struct pollfd p = { sock, POLLIN, 0 };
    int64_t until = cls_monotonic_us() + (int64_t)timeout_ms * 1000;
    for (;;) {
        int64_t left = (until - cls_monotonic_us() + 999) / 1000;
        int n = poll(&p, 1, left > 0 ? (int)left : 0);
        if (n > 0) break;
        if (n == 0) return -ETIMEDOUT;
        if (errno != EINTR) return -errno;
    }
    return receive_fds(sock, data, len, fds, max, count, MSG_DONTWAIT);
}

long cls_send_with_fd(int sock, int fd, const void *data, size_t len) {
    return send_with_fd(sock, fd, data, len, MSG_DONTWAIT);
}

long cls_receive_with_fd(int sock, void *data, size_t len, int *fd) {
    return receive_with_fd(sock, data, len, fd, 0);
}

long cls_receive_with_fd_noting(int sock, void *data, size_t len, int *fd, int *truncated) {
    int count = 0;
    long n = receive_fds_noting(sock, data, len, fd, 1, &count, 0, truncated);
    if (count == 0) *fd = -1;
    return n;
}

int cls_accept_cloexec(int listener) {
    for (;;) {
        int fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0) return fd;
        if (errno != EINTR && errno != ECONNABORTED) return -errno;
    }
}

int cls_peer_uid(int sock, unsigned int *uid) {
    struct ucred credentials;
    socklen_t length = sizeof credentials;
    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) return -errno;
    *uid = credentials.uid;
    return 0;
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

/* ---- the taken page ---- */

int cls_taken_page_create(const uint64_t **page) {
    int fd = memfd_create("sp-taken", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return -errno;
    if (ftruncate(fd, CLS_TAKEN_PAGE_BYTES) != 0
        || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    void *p = mmap(NULL, CLS_TAKEN_PAGE_BYTES, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        close(fd);
        return -e;
    }
    *page = (const uint64_t *)p;
    return fd;
}

int cls_taken_page_adopt(int fd, uint64_t **page) {
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return -EBADF;
    if (st.st_size < CLS_TAKEN_PAGE_BYTES) return -EINVAL;
    void *p = mmap(NULL, CLS_TAKEN_PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return -errno;
    *page = (uint64_t *)p;
    return 0;
}

int cls_taken_page_map_received(int fd, const uint64_t **page) {
    struct stat st;
    if (fstat(fd, &st) != 0) return -errno;
    if (!S_ISREG(st.st_mode) || st.st_size != CLS_TAKEN_PAGE_BYTES) return -EINVAL;
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0) return -errno;
    if ((seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) return -EPERM;
    void *p = mmap(NULL, CLS_TAKEN_PAGE_BYTES, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return -errno;
    *page = (const uint64_t *)p;
    return 0;
}

void cls_taken_page_unmap(const uint64_t *page) {
    if (page) munmap((void *)page, CLS_TAKEN_PAGE_BYTES);
}
