/* plugin-forkserver: the thread ids its main thread keeps in memory, found after the preload
   and cleared in each child (see main.c for the server itself). */
#define _GNU_SOURCE
#include "thread_ids.h"
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

/* ---- thread ids kept in memory ----

   A worker's main thread is a copy of this server's, and some of what that thread keeps in memory
   is its thread id, which in the worker is no longer its own. Two kinds of it matter:

   - The C library's, in its thread descriptor: a raw clone (the only way to pass CLONE_PARENT and
     the namespace flags at fork) leaves it at the parent's value; recursive and PI mutexes,
     pthread_setschedparam and others on the main thread would use it. fork() has the kernel write
     the child's id there (CLONE_CHILD_SETTID); so does this server, at the same place
     (`tid_offset` into pthread_self()).
   - The loaded libraries' own: the Swift runtime (its once-lock, `swift_once`) and libdispatch
     (its unfair locks) keep each thread's id in a thread-local variable the first time they need
     it, and a lock records its owner by that id in a priority-inheritance futex, which the kernel
     hands over only when the id in it is the caller's. Loading the worker's library runs their
     initializers on this thread, which fill this thread's copies in with this server's id. A lock
     a worker's main thread held and another thread wanted was then never handed over: the
     waiter's FUTEX_LOCK_PI fails (no such owner in its PID namespace), the holder's
     FUTEX_UNLOCK_PI fails (the id in the lock is not its own), and both retry forever (a worker
     spinning on two CPUs until the watchdog killed it; ForkServerTests.runtimeLocksInForkedWorkers).
     A child clears them (`cached_tid_slots`) before any of its code runs: 0 makes each library
     ask the kernel again on the next use. An exec'd worker starts with none filled in.

   Both are found once, after the preload, the same way: the 4-byte slots that hold this thread's
   id here and, in a second, short-lived thread that has the libraries fill theirs in (the
   runtime's once on a token of its own, libdispatch's thread-specific data: their C functions, no
   Swift code), that thread's id at the same place: the same offset into its own descriptor, the
   same offset of the same library's thread-local block. Two different ids at one place: no
   coincidence. The second thread has ended when the search returns. */

/* The id lies within the descriptor's first kilobyte on every glibc so far (0x2d0 on 2.36). */
#define FS_DESCRIPTOR_SCAN 1024
#define FS_MAX_TLS_MODULES 64
#define FS_MAX_TID_SLOTS 16

long fs_tid_offset = -1;

struct tls_module { char name[512]; size_t size; };
static struct tls_module tls_modules[FS_MAX_TLS_MODULES];
static int tls_module_count;
static int *cached_tid_slots[FS_MAX_TID_SLOTS];
static int cached_tid_slot_count;

/* Every loaded object with thread-local storage: the libraries by name, and the executable itself
   (the first object, named ""), which holds the runtimes when a host program is its own fork
   server and was linked with them (`-static-stdlib`). */
static int note_tls_module(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    int *index = data;
    int first = (*index)++ == 0;
    if (!info->dlpi_name || (!info->dlpi_name[0] && !first) || tls_module_count >= FS_MAX_TLS_MODULES) return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type != PT_TLS) continue;
        struct tls_module *m = &tls_modules[tls_module_count++];
        snprintf(m->name, sizeof m->name, "%s", info->dlpi_name);
        m->size = info->dlpi_phdr[i].p_memsz;
    }
    return 0;
}

/* The calling thread's block of module `m`, or NULL when it has none (yet). */
static char *tls_block(const struct tls_module *m) {
    void *handle = m->name[0] ? dlopen(m->name, RTLD_LAZY | RTLD_NOLOAD) : dlopen(NULL, RTLD_LAZY);
    if (!handle) return NULL;
    void *block = NULL;
    if (dlinfo(handle, RTLD_DI_TLS_DATA, &block) != 0) block = NULL;
    dlclose(handle);
    return block;
}

/* The offsets (at most `max`) where `mine` holds `my_tid` and `theirs` holds `their_tid`. */
static int same_place_ids(const char *mine, pid_t my_tid, const char *theirs, pid_t their_tid, size_t size,
                          size_t *out, int max) {
    int n = 0;
    for (size_t off = 0; off + sizeof(pid_t) <= size && n < max; off += sizeof(pid_t)) {
        pid_t a, b;
        memcpy(&a, mine + off, sizeof a);
        memcpy(&b, theirs + off, sizeof b);
        if (a == my_tid && b == their_tid) out[n++] = off;
    }
    return n;
}

/* What the main thread hands the second one: its own places. */
struct id_probe {
    pid_t tid;
    const char *descriptor;
    char *blocks[FS_MAX_TLS_MODULES];
};

static void nothing(void *context) { (void)context; }

typedef void (*swift_once_fn)(void *token, void (*body)(void *), void *context);
typedef void *(*dispatch_get_specific_fn)(const void *key);

/* The same functions linked into the executable itself (found where dlsym cannot see them: an
   executable exports no symbols by default); NULL where they are not. */
extern void swift_once(void *token, void (*body)(void *), void *context) __attribute__((weak));
extern void *dispatch_get_specific(const void *key) __attribute__((weak));

static void *id_probe_thread(void *p) {
    const struct id_probe *main_thread = p;
    pid_t tid = (pid_t)syscall(SYS_gettid);
    size_t offsets[FS_MAX_TID_SLOTS];
    if (same_place_ids(main_thread->descriptor, main_thread->tid, (const char *)pthread_self(), tid,
                       FS_DESCRIPTOR_SCAN, offsets, 1) == 1)
        fs_tid_offset = (long)offsets[0];
    /* The runtime's id: its once, on a token of our own. */
    swift_once_fn once = (swift_once_fn)dlsym(RTLD_DEFAULT, "swift_once");
    if (!once) once = swift_once;
    static _Alignas(16) char token[64];
    if (once) once(token, nothing, NULL);
    /* libdispatch's: its thread-specific data, made on first use. */
    dispatch_get_specific_fn get_specific = (dispatch_get_specific_fn)dlsym(RTLD_DEFAULT, "dispatch_get_specific");
    if (!get_specific) get_specific = dispatch_get_specific;
    static char key;
    if (get_specific) (void)get_specific(&key);
    /* Compared here: this thread's blocks go with it. */
    for (int i = 0; i < tls_module_count; i++) {
        char *mine = main_thread->blocks[i], *ours = tls_block(&tls_modules[i]);
        if (!mine || !ours) continue;
        int room = FS_MAX_TID_SLOTS - cached_tid_slot_count;
        int n = same_place_ids(mine, main_thread->tid, ours, tid, tls_modules[i].size, offsets, room);
        for (int k = 0; k < n; k++) cached_tid_slots[cached_tid_slot_count++] = (int *)(void *)(mine + offsets[k]);
    }
    return NULL;
}

/* After the preload, on the main thread: finds both kinds (above). Returns 0, or -1 when the
   second thread could not be made. */
int fs_find_thread_ids(void) {
    tls_module_count = 0;
    cached_tid_slot_count = 0;
    int index = 0;
    dl_iterate_phdr(note_tls_module, &index);
    static struct id_probe probe;
    probe.tid = (pid_t)syscall(SYS_gettid);
    probe.descriptor = (const char *)pthread_self();
    for (int i = 0; i < tls_module_count; i++) probe.blocks[i] = tls_block(&tls_modules[i]);
    pthread_t t;
    if (pthread_create(&t, NULL, id_probe_thread, &probe) != 0) return -1;
    pthread_join(t, NULL);
    return 0;
}

/* In the child, first: each library asks for its thread's id again. */
void fs_clear_cached_tids(void) {
    for (int i = 0; i < cached_tid_slot_count; i++) *cached_tid_slots[i] = 0;
}
