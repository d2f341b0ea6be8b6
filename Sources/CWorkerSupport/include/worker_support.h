#ifndef WORKER_SUPPORT_H
#define WORKER_SUPPORT_H
#include <stdint.h>
#include <sys/types.h>

/* prctl(PR_SET_PDEATHSIG, sig). Returns 0 or -errno. */
int cws_set_parent_death_signal(int sig);
/* prctl(PR_SET_NO_NEW_PRIVS, 1). Returns 0 or -errno. */
int cws_set_no_new_privs(void);
/* prctl(PR_SET_DUMPABLE, 0): no core dumps, no ptrace attach by same-uid peers. Returns 0 or -errno. */
int cws_set_not_dumpable(void);
/* Blocks the lifecycle signals (TERM, INT, USR1, TSTP, CONT, HUP) in the calling thread, so threads
   created later inherit the mask, and ignores SIGPIPE. Returns 0 or -errno. */
int cws_block_lifecycle_signals(void);
/* Waits for one of the lifecycle signals; returns its number, or -errno. */
int cws_wait_lifecycle_signal(void);
/* Closes every descriptor from `first` up, except `keep`. Returns 0 or -errno. */
int cws_close_descriptors_from(int first, int keep);
/* CLOCK_MONOTONIC in microseconds. */
int64_t cws_monotonic_us(void);

#endif
