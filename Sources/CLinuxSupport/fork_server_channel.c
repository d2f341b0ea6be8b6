/* The supervisor's side of the fork server's channel (fork_server_protocol.h). */
#define _GNU_SOURCE
#include "internal.h"

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

int cls_forkserver_spawn(int sock, char *const envp[], int socket_fd, int channel_fd, int payload_fd, int page_fd, int stdout_fd, int stderr_fd,
                         int isolated, int empty_network, int timeout_ms, pid_t *pid, int *pidfd, int64_t *fork_us,
                         char *message, size_t message_len) {
    if (message_len > 0) message[0] = 0;
    struct fs_request h = { FS_MAGIC, (isolated ? FS_ISOLATED : 0) | (channel_fd >= 0 ? FS_DESCRIPTOR_CHANNEL : 0)
                                      | (payload_fd >= 0 ? FS_PAYLOAD_CHANNEL : 0) | (empty_network ? FS_EMPTY_NETWORK : 0)
                                      | (payload_fd >= 0 && page_fd >= 0 ? FS_TAKEN_PAGE : 0), 0, 0 };
    size_t bytes = 0;
    for (char *const *e = envp; *e; e++) { bytes += strlen(*e) + 1; h.env_count++; }
    if (bytes + sizeof h > FS_MAX_REQUEST) return EMSGSIZE;
    h.env_bytes = (uint32_t)bytes;
    char *buf = malloc(sizeof h + bytes);
    if (!buf) return ENOMEM;
    memcpy(buf, &h, sizeof h);
    char *p = buf + sizeof h;
    for (char *const *e = envp; *e; e++) { size_t l = strlen(*e) + 1; memcpy(p, *e, l); p += l; }
    /* In this order, those that are there: the fork server knows which from the flags. */
    int fds[6] = { socket_fd, stdout_fd, stderr_fd, -1, -1, -1 };
    int nfds = 3;
    if (channel_fd >= 0) fds[nfds++] = channel_fd;
    if (payload_fd >= 0) fds[nfds++] = payload_fd;
    if (payload_fd >= 0 && page_fd >= 0) fds[nfds++] = page_fd;
    union { struct cmsghdr align; char bytes[CMSG_SPACE(6 * sizeof(int))]; } control;
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
