#ifndef SANDBOX_SUPPORT_H
#define SANDBOX_SUPPORT_H
#include <stdint.h>
#include <sys/types.h>
#include "linux_support.h"

/* ---- Landlock (definitions of our own: the distribution's headers may predate the kernel's ABI) ---- */
static const uint64_t CWS_LL_FS_EXECUTE = 0x1ULL;
static const uint64_t CWS_LL_FS_WRITE_FILE = 0x2ULL;
static const uint64_t CWS_LL_FS_READ_FILE = 0x4ULL;
static const uint64_t CWS_LL_FS_READ_DIR = 0x8ULL;
static const uint64_t CWS_LL_FS_REMOVE_DIR = 0x10ULL;
static const uint64_t CWS_LL_FS_REMOVE_FILE = 0x20ULL;
static const uint64_t CWS_LL_FS_MAKE_CHAR = 0x40ULL;
static const uint64_t CWS_LL_FS_MAKE_DIR = 0x80ULL;
static const uint64_t CWS_LL_FS_MAKE_REG = 0x100ULL;
static const uint64_t CWS_LL_FS_MAKE_SOCK = 0x200ULL;
static const uint64_t CWS_LL_FS_MAKE_FIFO = 0x400ULL;
static const uint64_t CWS_LL_FS_MAKE_BLOCK = 0x800ULL;
static const uint64_t CWS_LL_FS_MAKE_SYM = 0x1000ULL;
static const uint64_t CWS_LL_FS_REFER = 0x2000ULL; /* ABI 2 */
static const uint64_t CWS_LL_FS_TRUNCATE = 0x4000ULL; /* ABI 3 */
static const uint64_t CWS_LL_FS_IOCTL_DEV = 0x8000ULL; /* ABI 5 */
static const uint64_t CWS_LL_NET_BIND_TCP = 0x1ULL;  /* ABI 4 */
static const uint64_t CWS_LL_NET_CONNECT_TCP = 0x2ULL;  /* ABI 4 */
static const uint64_t CWS_LL_SCOPE_ABSTRACT_UNIX_SOCKET = 0x1ULL; /* ABI 6 */
static const uint64_t CWS_LL_SCOPE_SIGNAL = 0x2ULL;  /* ABI 6 */

/* landlock_create_ruleset; returns the ruleset fd or -errno. `scoped` needs ABI 6, `net` ABI 4. */
int cws_landlock_create(uint64_t handled_fs, uint64_t handled_net, uint64_t scoped);
/* Adds a path-beneath rule for `path` (opened O_PATH): `access`, or only `access & file_access`
   when it is not a folder. Returns 0 or -errno; `opened` says whether the path could be opened
   (0: it is missing or unreachable, and the errno is open's). */
int cws_landlock_allow_path(int ruleset, const char *path, uint64_t access, uint64_t file_access, int *opened);
/* landlock_restrict_self, then closes the ruleset. Returns 0 or -errno. */
int cws_landlock_restrict(int ruleset);

/* ---- namespaces, capabilities, rlimits ---- */
/* Linux constants glibc hides behind _GNU_SOURCE. */
static const int CWS_CLONE_NEWUSER = 0x10000000;
static const int CWS_CLONE_NEWNET = 0x40000000;
static const int CWS_CLONE_NEWIPC = 0x08000000;
static const int CWS_CLONE_NEWUTS = 0x04000000;
static const int CWS_CLONE_NEWNS = 0x00020000;
static const int CWS_RLIMIT_DATA = 2;
static const int CWS_RLIMIT_CORE = 4;
static const int CWS_RLIMIT_NPROC = 6;
static const int CWS_RLIMIT_NOFILE = 7;

/* unshare(flags). Returns 0 or -errno. */
int cws_unshare(int flags);
/* Writes "inside outside 1" to /proc/self/uid_map and gid_map (after denying setgroups). */
int cws_map_ids(uid_t uid, gid_t gid);
/* capset to an empty set and drops the bounding set. Returns 0 or -errno. */
int cws_drop_capabilities(void);
/* setrlimit with soft = hard = value. Returns 0 or -errno. */
int cws_set_rlimit(int resource, uint64_t value);
/* Current hard limit of `resource`, or 0 on error. */
uint64_t cws_get_rlimit_max(int resource);

/* ---- the minimal file-system view ---- */
/* In a mount namespace of its own (holding CAP_SYS_ADMIN there): makes every mount private, then
   builds a new root on a tmpfs mounted at `scratch`: a bind mount of each of `paths` (read-only
   unless `writable[i]`; a path under /proc, a missing one, and a read-only one inside another
   read-only one need none), a symbolic link where `links[i]` is not NULL (its text), /dev/null,
   /dev/zero, /dev/urandom, /dev/random, a private /dev/shm and a /proc of its PID namespace, and
   pivots into it. Returns 0, or -errno with the failed step in `what`. */
int cws_enter_minimal_root(const char *const *paths, const int *writable, const char *const *links, int n,
                           const char *scratch, char *what, size_t what_len);

/* Waits up to `timeout_ms` for one byte on `fd` and returns it (0-255), or -1 (time out, end of
   stream, error). */
int cws_wait_byte(int fd, int timeout_ms);
/* 1 when the peer of socket `fd` has closed its end (poll POLLHUP/POLLRDHUP, no wait). */
int cws_peer_hung_up(int fd);

/* ---- loading the filter ---- */
/* seccomp(SECCOMP_SET_MODE_FILTER) of the BPF program `insns` (`count` 8-byte instructions) with
   TSYNC, and with `listener` also NEW_LISTENER and TSYNC_ESRCH (libseccomp 2.5 will not combine a
   listener with TSYNC). Returns the listener fd (close-on-exec), or 0 without one, or -errno. */
int cws_seccomp_install(const void *insns, unsigned count, int listener);

/* ---- the SIGSYS reporter ---- */
/* Registers a syscall's name for the reporter (call before the filter is loaded; names are copied). */
void cws_sigsys_set_name(int nr, const char *name);
/* Installs the SIGSYS handler: it writes an `exit` frame naming the denied syscall to `fd` (holding
   `lock`, the connection's send lock, so it never lands inside another thread's frame), a line to
   stderr, and _exits with CWS_SANDBOX_VIOLATION_EXIT. Returns 0 or -errno. */
int cws_install_sigsys_reporter(int fd, cls_send_lock *lock);
#define CWS_SANDBOX_VIOLATION_EXIT 159
/* For PID 1 of its own namespace, which the kernel spares every signal it sends itself with the
   default action (raise(SIGABRT), abort(), kill(getpid(), SIGTERM) would be ignored): a handler for
   each of `signals` that reports {"type":"exit","reason":"signaled","signal":"SIGABRT"} on the
   protocol socket (as the SIGSYS reporter does) and exits with 128 + the signal. Call after
   cws_install_sigsys_reporter (it uses its descriptor and lock). Returns 0 or -errno. */
int cws_install_fatal_signal_reporter(const int *signals, int count);

#endif
