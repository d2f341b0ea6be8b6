#ifndef LINUX_SUPPORT_H
#define LINUX_SUPPORT_H
/* The Linux calls Swift cannot make directly (variadic syscall/prctl, macros, _GNU_SOURCE-only
   declarations), as plain functions. Every function returns 0 (or a value) on success and -errno on
   failure unless it says otherwise. Imported only by the LinuxSupport Swift target. */
#include <stdint.h>
#include <sys/types.h>

/* ---- processes ---- */

/* Spawns `path` with posix_spawn: `socket_fd` becomes descriptor 3, `channel_fd` (if >= 0, the
   descriptor channel) descriptor 4, `payload_fd` (if >= 0, the payload channel) descriptor 5, `page_fd` (if >= 0, the taken page) descriptor 6, `stdout_fd`/`stderr_fd` become 1 and 2, stdin is /dev/null, every other descriptor is closed, the child gets a new session
   (setsid), an empty signal mask and default dispositions. No code of ours runs in the child.
   On success sets *pid and *pidfd (a pidfd_open descriptor, close-on-exec) and returns 0; returns an
   errno value otherwise. The pidfd is opened before anyone can reap the child (this process never
   waits for "any child"), so it always names the process just spawned. */
int cls_spawn(const char *path, char *const argv[], char *const envp[],
              int socket_fd, int channel_fd, int payload_fd, int page_fd, int stdout_fd, int stderr_fd, pid_t *pid, int *pidfd);

/* The same, but the child starts in new user and PID namespaces (clone with CLONE_VM |
   CLONE_VFORK, as posix_spawn does, plus CLONE_NEWUSER | CLONE_NEWPID | CLONE_PIDFD; the worker
   unshares its mount namespace itself):
   it is PID 1 of its own namespace, its parent death signal is SIGKILL (set before the exec, as
   its parent is invisible from there), and it keeps CAP_SETUID, CAP_SETGID and CAP_SYS_ADMIN of
   its user namespace across the exec (ambient) to map its ids and build its mount view itself.
   Returns an errno value when the host refuses the namespaces (EPERM, ENOSPC, EINVAL), the child's
   set-up fails, or the exec fails. */
int cls_spawn_isolated(const char *path, char *const argv[], char *const envp[],
                       int socket_fd, int channel_fd, int payload_fd, int page_fd, int stdout_fd, int stderr_fd, pid_t *pid, int *pidfd);

/* ---- the fork server's channel (fork_server_protocol.h, Sources/ForkServer) ---- */

struct fs_reply;
/* A close-on-exec SOCK_SEQPACKET pair with room for the longest request. */
int cls_seqpacket_pair(int fds[2]);
/* Waits up to `timeout_ms` for one answer of the fork server; copies its message (NUL-terminated,
   cut to `message_len`). 0, or -ETIMEDOUT, -EPIPE (it has gone), -EPROTO (not its answer). */
int cls_forkserver_read(int sock, int timeout_ms, struct fs_reply *out, char *message, size_t message_len);
/* Asks the fork server for a worker with these descriptors and this environment (as cls_spawn and
   cls_spawn_isolated would start it) and opens a pidfd for it (it is this process's child).
   0 with *pid, *pidfd and *fork_us set; a positive errno value when this one request failed (the
   fork server said why in `message`, or the request did not fit: EMSGSIZE); a negative errno value
   when the channel failed (-ETIMEDOUT, -EPIPE, -EPROTO): the fork server must not be used again. */
int cls_forkserver_spawn(int sock, char *const envp[], int socket_fd, int channel_fd, int payload_fd, int page_fd, int stdout_fd, int stderr_fd,
                         int isolated, int empty_network, int timeout_ms, pid_t *pid, int *pidfd, int64_t *fork_us,
                         char *message, size_t message_len);

/* waitid(P_PIDFD, pidfd, WEXITED [| WNOHANG]) with the child's rusage. Returns 1 and fills the
   outputs when the child has ended (and is now reaped), 0 when `nohang` and it is still running,
   or -errno. `code` is the exit status or the signal number, `signaled` is 1 when a signal ended it,
   `max_rss_kb` its peak resident size, `cpu_us` the CPU time it used (user + system, microseconds). */
int cls_pidfd_wait(int pidfd, int nohang, int *code, int *signaled, long *max_rss_kb, long long *cpu_us);
/* pidfd_send_signal(pidfd, sig): signals exactly that process, never a reused pid. */
int cls_pidfd_signal(int pidfd, int sig);

/* epoll for the child watcher: epoll_create1(EPOLL_CLOEXEC) (returns the fd), adding and removing
   a descriptor to watch for readability, and a wait that fills `fds` with up to `max` ready
   descriptors (returns how many, or -errno). */
int cls_epoll_create(void);
int cls_epoll_add(int epfd, int fd);
int cls_epoll_remove(int epfd, int fd);
int cls_epoll_wait(int epfd, int *fds, int max);
/* Names the calling thread (at most 15 characters are kept). */
void cls_set_thread_name(const char *name);

/* pipe2(O_CLOEXEC). */
int cls_pipe_cloexec(int fds[2]);

/* prctl(PR_SET_PDEATHSIG, sig). */
int cls_set_parent_death_signal(int sig);
/* prctl(PR_SET_NO_NEW_PRIVS, 1). */
int cls_set_no_new_privs(void);
/* prctl(PR_SET_DUMPABLE, 0): no core dumps, no ptrace attach or /proc/<pid>/mem by same-uid peers. */
int cls_set_not_dumpable(void);
/* Closes every descriptor from `first` up, except the `n` in `keep` (close_range, else
   /proc/self/fd). */
int cls_close_descriptors_from(int first, const int *keep, int n);
/* CLOCK_MONOTONIC in microseconds. */
int64_t cls_monotonic_us(void);
/* CLOCK_MONOTONIC in nanoseconds. */
int64_t cls_monotonic_ns(void);
/* gettid(). */
int32_t cls_thread_id(void);
/* Number of threads of this process (/proc/self/stat field 20), or -errno. */
int cls_thread_count(void);
/* The paths of the shared objects loaded in this process, as the dynamic loader has them
   (dl_iterate_phdr), one a line in `buf`, cut at `len`; returns the bytes written. */
size_t cls_loaded_objects(char *buf, size_t len);

/* ---- signals ---- */

/* Blocks the lifecycle signals (TERM, INT, USR1, TSTP, CONT, HUP) in the calling thread, so threads
   created later inherit the mask, and ignores SIGPIPE. */
int cls_block_lifecycle_signals(void);
/* Blocks them in the calling thread alone, SIGPIPE left as it is (a thread of ours in a program
   whose signals are its own). */
int cls_mask_lifecycle_signals(void);
/* Waits for one of the lifecycle signals; returns its number, or -errno. */
/* Blocks `sig` in the calling thread (threads made after inherit it). */
int cls_block_signal(int sig);
/* cls_wait_lifecycle_signal, also waiting for `extra` (the supervisor's SIGUSR2; 0: none). */
int cls_wait_lifecycle_signal_or(int extra);
int cls_wait_lifecycle_signal(void);
/* Catches the lifecycle signals and `extra` (0: none) with a handler that writes the signal's
   number to a pipe, whichever thread the kernel gives it to: one of a program's own threads made
   before the signals were blocked (an embedded host's main thread, a task pool) takes it as well as
   the relay. Counted: each catch is paired with a release (cls_release_caught_signals). 0, or
   -errno. */
int cls_catch_lifecycle_signals(int extra);
/* Waits for a signal cls_catch_lifecycle_signals caught: unblocks them (and `extra`) in the calling
   thread first, so that one pending while every thread blocked it comes to the handler here. Its
   number, or -errno. */
int cls_wait_caught_signal(int extra);
/* Has the relay waiting in cls_wait_caught_signal block the signals for itself too, after what the
   handler wrote before (each of those raised again): from then on they stay pending for the
   process, across an exec as well, until cls_resume_caught_relay. Waits up to `timeout_ms` for it.
   0: paused; 1: asked, and not paused yet within the wait (it pauses when it reads the request:
   a resume must follow all the same); -ESRCH: no relay serves; -EAGAIN: it could not be asked. */
int cls_pause_caught_relay(int timeout_ms);
/* The paused relay takes the signals again, those pending first. */
void cls_resume_caught_relay(void);
/* Ends one relay waiting in cls_wait_caught_signal (it returns 0) and, at the last release of as
   many as there were catches, gives the lifecycle signals and `extra` back what the program had
   for them before the first: an embedded host that stopped leaves them to its program. */
void cls_release_caught_signals(int extra);
/* Gives the allocator's free memory back to the system (malloc_trim). */
void cls_trim_memory(void);
/* The kernel's name of a signal ("SIGSEGV"), or NULL. */
const char *cls_signal_name(int sig);

/* ---- files ---- */

/* renameat2(RENAME_EXCHANGE): swaps two paths atomically. */
int cls_exchange(const char *a, const char *b);
/* fsync of a path (file or directory). */
int cls_fsync_path(const char *path);

/* ---- Landlock ---- */

/* The Landlock ABI version the kernel offers (landlock_create_ruleset with
   LANDLOCK_CREATE_RULESET_VERSION), or -errno when it has none. */
int cls_landlock_abi(void);

/* ---- descriptor passing (SCM_RIGHTS, one byte of payload) ---- */

int cls_send_fd(int sock, int fd);
/* Non-blocking: 1 and *fd set (close-on-exec) when a descriptor came, 0 at end of stream, -EAGAIN
   when nothing is there yet, -errno otherwise. */
int cls_receive_fd(int sock, int *fd);

/* Peer links (docs/protocol.md): sends `len` bytes with `fd` attached unless it is -1, without
   waiting (MSG_DONTWAIT | MSG_NOSIGNAL): the bytes sent, or -errno (-EAGAIN: the socket is full). */
long cls_send_with_fd(int sock, int fd, const void *data, size_t len);

/* memmem (a GNU extension Swift's Glibc module leaves out). */
const void *cls_find(const void *haystack, size_t length, const void *needle, size_t needle_length);

/* The most descriptors one message carries (a frame's attachments, docs/protocol.md "Bytes"). */
#define CLS_MAX_PASSED_FDS 16
/* One sendmsg (blocking, EINTR retried, no SIGPIPE) of `len` bytes with `count` descriptors
   attached: the bytes sent, or -errno. */
long cls_send_fds(int sock, const int *fds, int count, const void *data, size_t len);
/* The same without waiting (MSG_DONTWAIT): -EAGAIN when the socket has no room. */
long cls_send_fds_now(int sock, const int *fds, int count, const void *data, size_t len);
/* cls_receive_fds, but waiting up to `timeout_ms` for the message (poll): -ETIMEDOUT if none came. */
long cls_receive_fds_within(int sock, void *data, size_t len, int *fds, int max, int *count, int timeout_ms);
/* One non-blocking recvmsg of up to `len` bytes and up to `max` descriptors (close-on-exec):
   the bytes read (0: end of stream), *count the descriptors received; -EBADMSG when some were
   dropped (MSG_CTRUNC) or more than `max` came (all closed), -EAGAIN when nothing waits. */
long cls_receive_fds(int sock, void *data, size_t len, int *fds, int max, int *count);
/* Reads up to `len` bytes (waiting for some), and the descriptor attached to them if any (*fd, made
   close-on-exec; else -1): the bytes read, 0 at end of stream, -errno. */
long cls_receive_with_fd(int sock, void *data, size_t len, int *fd);
/* As cls_receive_with_fd, but a descriptor dropped for want of room (MSG_CTRUNC: this process is
   at its open-files limit) is no error: the bytes that came are returned, *fd is -1 and
   *truncated is 1, so that the caller can drop that one message and read the next. */
long cls_receive_with_fd_noting(int sock, void *data, size_t len, int *fd, int *truncated);
/* An eventfd (close-on-exec, non-blocking) to wake a thread waiting in poll, or -errno. */
int cls_wake_fd(void);

/* accept4 with SOCK_CLOEXEC, retried on EINTR: the connection, or -errno. */
int cls_accept_cloexec(int listener);

/* The uid of a Unix socket's peer (SO_PEERCRED): 0 and *uid set, or -errno. */
int cls_peer_uid(int sock, unsigned int *uid);

/* ---- seccomp user notification: the supervisor answers for its workers' filters ---- */

typedef struct cls_seccomp_notification {
    uint64_t id;
    uint32_t pid;
    int32_t nr;
    uint32_t arch;
    uint64_t args[6];
} cls_seccomp_notification;
/* poll(0) on a listener: 1 a notification is pending, 0 nothing, -EPIPE no task uses the filter
   any more (the worker has ended), or -errno. */
int cls_seccomp_listener_state(int fd);
/* SECCOMP_IOCTL_NOTIF_RECV (call only after state said 1: it blocks otherwise); -ENOENT when the
   task went away meanwhile. */
int cls_seccomp_receive(int fd, cls_seccomp_notification *out);
/* SECCOMP_IOCTL_NOTIF_SEND: the syscall fails with `error` (an errno value). */
int cls_seccomp_respond_error(int fd, uint64_t id, int error);

/* ---- a send lock a signal handler can take ---- */

/* Serialises writers of one socket so frames never interleave, including the SIGSYS reporter,
   which runs in a signal handler where no ordinary mutex may be taken. A futex word: 0 free,
   1 held, 2 held with waiters; `owner` is the holder's thread id. */
/* `held`: whole frames a writer holds back to send later in one write (BlockingConnection's
   holdWritesWhileDelivering), kept here, under the lock, so that a fatal signal's reporter or an
   exit handler can still send them before the process ends. */
typedef struct cls_send_lock {
    int32_t state;
    int32_t owner;
    uint8_t *held;
    size_t held_len;
    size_t held_capacity;
} cls_send_lock;
void cls_send_lock_acquire(cls_send_lock *lock);
void cls_send_lock_release(cls_send_lock *lock);
/* For a signal handler: 1 when acquired within `timeout_ms`, 0 when the calling thread already
   holds it (it was interrupted mid-frame) or the time ran out. Async-signal-safe. */
int cls_send_lock_acquire_from_signal(cls_send_lock *lock, int timeout_ms);
/* Appends `a` then `b` (either may be empty) to the held frames; the caller holds the lock.
   0, or -ENOMEM. */
int cls_send_lock_hold(cls_send_lock *lock, const void *a, size_t a_len, const void *b, size_t b_len);
/* send() of all `len` bytes (MSG_NOSIGNAL, retried on EINTR): 0, or -1 with errno at the first
   failure. Async-signal-safe. */
int cls_send_all(int fd, const void *bytes, size_t len);
/* Writes the held frames to `fd` and forgets them; the caller holds the lock. Async-signal-safe
   (for a reporter that ends the process); gives up on the first failed write. */
void cls_send_lock_write_held(cls_send_lock *lock, int fd);
/* Frees the held frames' buffer (when the lock goes). */
void cls_send_lock_free_held(cls_send_lock *lock);
/* At the process's exit (exit(), or returning from main), sends what `lock` holds to `fd` first,
   if the lock can be had within 500 ms. One lock and descriptor per process (the worker's). */
void cls_send_lock_flush_at_exit(cls_send_lock *lock, int fd);
/* Forgets `lock` for the exit handler above (it is going away). */
void cls_send_lock_forget_at_exit(cls_send_lock *lock);
/* The peer link whose replies the worker's links thread holds back while it delivers one read's
   calls (LinkSocket.holdWrites): `lock` and its socket `fd`, or NULL when it holds none. A fatal
   signal's reporter and the exit handler above send what it holds (`cls_link_hold_flush`) before
   the process ends, as they do for the protocol socket: answered calls stay answered. */
void cls_link_hold_set(cls_send_lock *lock, int fd);
/* Writes what the link set above holds, if its lock can be had within `timeout_ms` (not when the
   calling thread is half-way through a write of its own). Async-signal-safe. */
void cls_link_hold_flush(int timeout_ms);

/* ---- upgrading in place (upgrade.c) ---- */
/* Sets (on != 0) or clears FD_CLOEXEC on `fd`: a descriptor handed to the new binary loses it. */
int cls_set_cloexec(int fd, int on);
int cls_cloexec_all_but(const int *keep, int count);
/* execveat(fd, "", AT_EMPTY_PATH): runs the binary opened as `fd` (the file that was checked, even
   if its path has been replaced since). Returns -errno when it fails (it does not return otherwise). */
int cls_exec_fd(int fd, char *const argv[], char *const envp[]);
/* Until cls_rescue_disarm: a fatal signal, or `seconds` passing, execs `previous_binary` with `argv`
   and `envp` plus SP_UPGRADE_FAILED=<why>, from the main thread (another thread hands it there). */
int cls_rescue_arm(int previous_binary, char *const argv[], char *const envp[], unsigned seconds);
/* The rescue, now, with `reason` (the new binary refused what it was handed). Does not return
   unless the rescue is not armed (-EBADF) or the exec fails. */
int cls_rescue_fire(const char *reason);
void cls_rescue_disarm(void);
/* The fatal signals (SIGSEGV, SIGBUS, SIGILL, SIGTRAP, SIGABRT, SIGFPE, SIGSYS) back to their
   default action and unblocked in the calling thread: the process ends at once (the Swift runtime's backtracer, which cannot read a
   non-dumpable process, would hold it instead). */
void cls_default_fatal_signals(void);
/* SO_COOKIE of a socket (unique while the system runs), or 0 when it has none. */
uint64_t cls_socket_cookie(int fd);
/* The product's version ("0.4.0"), from the stamp "@(#)sandboxed-plugins <version>" in the binary. */
const char *cls_product_version(void);

/* ---- the taken page (SPEC §15, Sources/SupervisorCore/Replay/TakenWatermark.swift) ----
 * One page a worker shares with the supervisor: its first 8 bytes are the highest id of a request
 * from the supervisor that the worker has handed to its plugin. The supervisor makes it (sealed, so
 * the worker can never shrink it under the supervisor's read) and hands it to the worker at its
 * spawn as descriptor 6; the worker maps it writable and writes it; the supervisor reads it when it
 * reads the worker's frames and once more after the worker died. No descriptor travels from a
 * worker for it at its start: a worker's SCM_RIGHTS count against its user's in-flight limit, which
 * the sandbox's small RLIMIT_NOFILE makes easy to reach when hundreds of workers start at once.
 * The worker keeps the descriptor, and sends it once when a supervisor that took it over in an
 * upgrade in place asks (`takenPage`), one worker at a time. */
#define CLS_TAKEN_PAGE_BYTES 4096
/* A memfd of one page, sealed against shrinking, growing and new seals, mapped read-only and
   shared at *page: the descriptor (close-on-exec) to hand to the worker, or -errno. */
int cls_taken_page_create(const uint64_t **page);
/* The worker's side: maps the page it was given (`fd`, a regular file of at least a page) writable
   and shared at *page. 0, or -EBADF (not a regular file), -EINVAL (too short), -errno of mmap. */
int cls_taken_page_adopt(int fd, uint64_t **page);
/* A worker's taken page sent again by the worker (after an upgrade in place): mapped read-only
   once checked to be a regular file (a memfd) of the page's size, sealed against shrinking and
   growing (so no later truncation can fault this mapping). 0, or a negative errno (-EINVAL: not
   a page; -EPERM: not sealed). The caller closes `fd`. */
int cls_taken_page_map_received(int fd, const uint64_t **page);
/* Unmaps a page mapped by any of the above. */
void cls_taken_page_unmap(const uint64_t *page);
static inline void cls_taken_store(uint64_t *page, uint64_t value) { __atomic_store_n(page, value, __ATOMIC_RELEASE); }
static inline uint64_t cls_taken_load(const uint64_t *page) { return __atomic_load_n(page, __ATOMIC_ACQUIRE); }
#endif
