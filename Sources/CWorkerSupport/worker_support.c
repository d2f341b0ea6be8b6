#define _GNU_SOURCE
#include "worker_support.h"
#include <errno.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>
#include <pthread.h>
#include <stdlib.h>

int cws_set_parent_death_signal(int sig) {
    return prctl(PR_SET_PDEATHSIG, (unsigned long)sig, 0, 0, 0) == 0 ? 0 : -errno;
}

int cws_set_no_new_privs(void) {
    return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 ? 0 : -errno;
}

int cws_set_not_dumpable(void) {
    return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0 ? 0 : -errno;
}

static void lifecycle_set(sigset_t *set) {
    sigemptyset(set);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGUSR1);
    sigaddset(set, SIGTSTP);
    sigaddset(set, SIGCONT);
    sigaddset(set, SIGHUP);
}

int cws_block_lifecycle_signals(void) {
    sigset_t set;
    lifecycle_set(&set);
    signal(SIGPIPE, SIG_IGN);
    int rc = pthread_sigmask(SIG_BLOCK, &set, NULL);
    return rc == 0 ? 0 : -rc;
}

int cws_wait_lifecycle_signal(void) {
    sigset_t set;
    lifecycle_set(&set);
    for (;;) {
        int sig = sigwaitinfo(&set, NULL);
        if (sig >= 0) return sig;
        if (errno != EINTR) return -errno;
    }
}

int cws_close_descriptors_from(int first, int keep) {
    /* close_range(2) when the kernel has it, else walk /proc/self/fd. */
    if (keep < first) {
        if (syscall(SYS_close_range, (unsigned)first, ~0U, 0) == 0) return 0;
    } else {
        int ok = 1;
        if (keep > first && syscall(SYS_close_range, (unsigned)first, (unsigned)(keep - 1), 0) != 0) ok = 0;
        if (ok && syscall(SYS_close_range, (unsigned)(keep + 1), ~0U, 0) != 0) ok = 0;
        if (ok) return 0;
    }
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -errno;
    int dfd = dirfd(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        if (fd >= first && fd != keep && fd != dfd) close(fd);
    }
    closedir(d);
    return 0;
}

int64_t cws_monotonic_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
