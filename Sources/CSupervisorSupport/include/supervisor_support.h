#ifndef SUPERVISOR_SUPPORT_H
#define SUPERVISOR_SUPPORT_H
#include <stdint.h>
#include <sys/types.h>

/* Spawns `path` with posix_spawn: `socket_fd` becomes descriptor 3, `stdout_fd`/`stderr_fd` become
   1 and 2, stdin is /dev/null, every other descriptor is closed, the child gets a new session
   (setsid), an empty signal mask and default dispositions. No code of ours runs in the child.
   Returns 0 and sets *pid, or an errno value. */
int css_spawn_worker(const char *path, char *const argv[], char *const envp[],
                     int socket_fd, int stdout_fd, int stderr_fd, pid_t *pid);

/* The layout of Linux's struct ucred (SO_PEERCRED), visible without _GNU_SOURCE. */
typedef struct css_ucred { int32_t pid; uint32_t uid; uint32_t gid; } css_ucred;
#define CSS_SO_PEERCRED 17

/* pipe2(O_CLOEXEC). Returns 0 or -errno. */
int css_pipe_cloexec(int fds[2]);

/* The Landlock ABI version the kernel offers (landlock_create_ruleset with
   LANDLOCK_CREATE_RULESET_VERSION), or -errno when it has none. */
int css_landlock_abi(void);

/* wait4(-1) blocking: the next child to end. Returns 0 and fills the outputs, or -errno (-ECHILD
   when there are no children). `code` is the exit status or the signal number, `signaled` is 1 when
   a signal ended it, `max_rss_kb` the child's peak resident size (rusage). */
int css_wait_any_child(pid_t *pid, int *code, int *signaled, long *max_rss_kb);

/* prctl(PR_SET_DUMPABLE, 0): workers (same uid) cannot ptrace the supervisor or read its memory. */
int css_set_not_dumpable(void);

/* renameat2(RENAME_EXCHANGE): swaps two paths atomically. Returns 0 or -errno. */
int css_exchange(const char *a, const char *b);
/* fsync of a path (file or directory). Returns 0 or -errno. */
int css_fsync_path(const char *path);
/* prctl(PR_SET_PDEATHSIG, sig). Returns 0 or -errno. */
int css_die_with_parent(int sig);

/* The kernel's name of a signal ("SIGSEGV"), or NULL. */
const char *css_signal_name(int sig);
#endif
