/* The send lock: frames from any thread and from a signal handler never interleave. */
#define _GNU_SOURCE
#include "internal.h"
#include <stdatomic.h>

/* ---- send lock (Drepper's futex mutex, "Futexes Are Tricky", mutex3) ---- */

static long futex(int32_t *word, int op, int32_t value, const struct timespec *timeout) {
    return syscall(SYS_futex, word, op | FUTEX_PRIVATE_FLAG, value, timeout, NULL, 0);
}

void cls_send_lock_acquire(cls_send_lock *lock) {
    int32_t c = 0;
    if (!__atomic_compare_exchange_n(&lock->state, &c, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
        if (c != 2) c = __atomic_exchange_n(&lock->state, 2, __ATOMIC_ACQUIRE);
        while (c != 0) {
            futex(&lock->state, FUTEX_WAIT, 2, NULL);
            c = __atomic_exchange_n(&lock->state, 2, __ATOMIC_ACQUIRE);
        }
    }
    __atomic_store_n(&lock->owner, cls_thread_id(), __ATOMIC_RELAXED);
}

void cls_send_lock_release(cls_send_lock *lock) {
    __atomic_store_n(&lock->owner, 0, __ATOMIC_RELAXED);
    if (__atomic_fetch_sub(&lock->state, 1, __ATOMIC_RELEASE) != 1) {
        __atomic_store_n(&lock->state, 0, __ATOMIC_RELEASE);
        futex(&lock->state, FUTEX_WAKE, 1, NULL);
    }
}

int cls_send_lock_acquire_from_signal(cls_send_lock *lock, int timeout_ms) {
    int32_t me = cls_thread_id();
    if (__atomic_load_n(&lock->owner, __ATOMIC_RELAXED) == me) return 0;
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        int32_t c = 0;
        if (__atomic_compare_exchange_n(&lock->state, &c, 2, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
            __atomic_store_n(&lock->owner, me, __ATOMIC_RELAXED);
            return 1;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        long elapsed = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
        if (elapsed >= timeout_ms) return 0;
        struct timespec wait = { 0, 1000000 };
        futex(&lock->state, FUTEX_WAIT, c == 0 ? 1 : c, &wait);
    }
}

int cls_send_lock_hold(cls_send_lock *lock, const void *a, size_t a_len, const void *b, size_t b_len) {
    size_t need = lock->held_len + a_len + b_len;
    if (need > lock->held_capacity) {
        size_t capacity = lock->held_capacity ? lock->held_capacity : 4096;
        while (capacity < need) capacity *= 2;
        uint8_t *grown = realloc(lock->held, capacity);
        if (!grown) return -ENOMEM;
        lock->held = grown;
        lock->held_capacity = capacity;
    }
    if (a_len) memcpy(lock->held + lock->held_len, a, a_len);
    if (b_len) memcpy(lock->held + lock->held_len + a_len, b, b_len);
    lock->held_len = need;
    return 0;
}

int cls_send_all(int fd, const void *bytes, size_t len) {
    size_t off = 0;
    while (off < len) {
        ssize_t w = send(fd, (const char *)bytes + off, len - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        off += (size_t)w;
    }
    return 0;
}

void cls_send_lock_write_held(cls_send_lock *lock, int fd) {
    cls_send_all(fd, lock->held, lock->held_len);
    lock->held_len = 0;
}

void cls_send_lock_free_held(cls_send_lock *lock) {
    free(lock->held);
    lock->held = NULL;
    lock->held_len = lock->held_capacity = 0;
}

static cls_send_lock *exit_lock = NULL;
static int exit_fd = -1;

/* The peer link whose replies the links thread holds now (at most one link at a time). */
static cls_send_lock *_Atomic link_lock = NULL;
static _Atomic int link_fd = -1;

void cls_link_hold_set(cls_send_lock *lock, int fd) {
    if (lock) {
        atomic_store(&link_fd, fd);
        atomic_store(&link_lock, lock);
    } else {
        atomic_store(&link_lock, NULL);
        atomic_store(&link_fd, -1);
    }
}

void cls_link_hold_flush(int timeout_ms) {
    cls_send_lock *lock = atomic_load(&link_lock);
    int fd = atomic_load(&link_fd);
    if (!lock || fd < 0 || !cls_send_lock_acquire_from_signal(lock, timeout_ms)) return;
    cls_send_lock_write_held(lock, fd);
    cls_send_lock_release(lock);
}

static void flush_held_at_exit(void) {
    cls_link_hold_flush(500);
    if (!exit_lock || exit_fd < 0 || !cls_send_lock_acquire_from_signal(exit_lock, 500)) return;
    cls_send_lock_write_held(exit_lock, exit_fd);
    cls_send_lock_release(exit_lock);
}

void cls_send_lock_flush_at_exit(cls_send_lock *lock, int fd) {
    int first = exit_lock == NULL;
    exit_lock = lock;
    exit_fd = fd;
    if (first) atexit(flush_held_at_exit);
}

void cls_send_lock_forget_at_exit(cls_send_lock *lock) {
    if (exit_lock == lock) exit_lock = NULL;
}
