/* The fork server's thread-id search (thread_ids.c). */
#ifndef FS_THREAD_IDS_H
#define FS_THREAD_IDS_H

/* The offset of the C library's thread id in a thread's descriptor (pthread_self()), or -1. */
extern long fs_tid_offset;

/* After the preload, on the main thread: finds glibc's offset and the loaded libraries' cached ids.
   Returns 0, or -1 when the short-lived probe thread could not be made. */
int fs_find_thread_ids(void);

/* In a child, first: each library asks the kernel for its thread's id again. */
void fs_clear_cached_tids(void);

#endif
