/* The worker's minimal file-system view: a new root in its mount namespace holding only the
 * paths it may see (sandbox.md, "The mount namespace"). Split from sandbox_support.c. */
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
    const char *devices[] = { "/dev/null", "/dev/zero", "/dev/urandom", "/dev/random" };
    enum { DEVICES = sizeof devices / sizeof devices[0] };
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
        /* A device of the list below is bound once, there (a path list may name /dev/null or
           /dev/urandom too: a second mount on the same point costs a mount and an unmount). */
        int device = 0;
        for (int d = 0; d < DEVICES && !device; d++) device = strcmp(order[i], devices[d]) == 0;
        if (device) continue;
        int covered = 0;
        for (int k = 0; k < i && !covered; k++) covered = fds[k] >= 0 && !rw[k] && !rw[i] && inside(order[i], order[k]);
        if (covered || link[i]) continue;
        /* Opened now, through the host's /proc: the tmpfs below may cover where they are. */
        fds[i] = open(order[i], O_PATH | O_CLOEXEC);
    }
    int rc = 0, pivoted = 0;
    char target[4096];
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
