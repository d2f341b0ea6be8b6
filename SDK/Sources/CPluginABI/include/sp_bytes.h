/*
 * sp_bytes.h: bytes larger than 64 KiB, as a sealed memfd (SPEC §13, docs/abi.md "Bytes"). Header
 * only (static inline functions): a C plugin needs nothing more to link.
 *
 * A plugin attaches bytes to a message by listing them in its top-level "attachments" member:
 * {"length": N} for bytes that follow the JSON in the same message, after one NUL byte (at most
 * 64 KiB each), or {"length": N, "fd": <descriptor>} for a memfd made with sp_bytes_create (above
 * 64 KiB). The value itself, in params or result, is the placeholder {"$bytes": <index>}.
 * host->send sends the descriptor on; the plugin keeps its own and closes it when send returns.
 * A descriptor the plugin receives (in a delivered message's attachments) is the plugin's to check,
 * map with sp_bytes_map, and close.
 */
#ifndef SP_BYTES_H
#define SP_BYTES_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Bytes up to this size travel in the message itself; larger ones as a sealed memfd. */
#define SP_BYTES_INLINE_LIMIT (64 * 1024)

#ifndef F_SEAL_SEAL
#define F_ADD_SEALS 1033
#define F_GET_SEALS 1034
#define F_SEAL_SEAL 0x0001
#define F_SEAL_SHRINK 0x0002
#define F_SEAL_GROW 0x0004
#define F_SEAL_WRITE 0x0008
#endif

/** The seals every sender sets and every receiver checks. */
#define SP_BYTES_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE)

/** A memfd holding a copy of `data`, sealed against writes, shrinking, growing and new seals
    (close-on-exec): the descriptor, or -errno. */
static inline int sp_bytes_create(const void *data, size_t len) {
    int fd = memfd_create("sp-bytes", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return -errno;
    /* Written, not mapped: F_SEAL_WRITE is refused while a writable shared mapping exists. */
    const char *p = (const char *)data;
    size_t left = len;
    while (left > 0) {
        ssize_t n = write(fd, p, left);
        if (n < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            close(fd);
            return -e;
        }
        p += n;
        left -= (size_t)n;
    }
    if (fcntl(fd, F_ADD_SEALS, SP_BYTES_SEALS | F_SEAL_SEAL) != 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    return fd;
}

/** A memfd of `len` zero bytes, to be written (through a shared writable mapping, or pwrite) and
    then sealed with sp_bytes_seal: the descriptor, or -errno. No copy of the bytes is made. */
static inline int sp_bytes_writable(size_t len) {
    int fd = memfd_create("sp-bytes", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return -errno;
    if (ftruncate(fd, (off_t)len) != 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    return fd;
}

/** Seals a memfd made by sp_bytes_writable once it is written (and every writable mapping of it
    is gone: the kernel refuses F_SEAL_WRITE while one exists): 0, or -errno. */
static inline int sp_bytes_seal(int fd) {
    return fcntl(fd, F_ADD_SEALS, SP_BYTES_SEALS | F_SEAL_SEAL) == 0 ? 0 : -errno;
}

/** 0 when `fd` is a regular file (a memfd) sealed against writes, shrinking and growing, holding
    exactly `length` bytes; else -EBADF (not a regular file), -EPERM (a seal missing) or -EINVAL
    (another length). Check every received descriptor before mapping it: an unsealed one could
    change after the check. */
static inline int sp_bytes_check(int fd, uint64_t length) {
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return -EBADF;
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || (seals & SP_BYTES_SEALS) != SP_BYTES_SEALS) return -EPERM;
    if ((uint64_t)st.st_size != length) return -EINVAL;
    return 0;
}

/** A read-only, shared mapping of the first `length` bytes of `fd`, or NULL (errno set). A
    length of 0 gives a non-NULL pointer that must not be read. */
static inline const void *sp_bytes_map(int fd, size_t length) {
    static const char empty = 0;
    if (length == 0) return &empty;
    void *p = mmap(NULL, length, PROT_READ, MAP_SHARED, fd, 0);
    return p == MAP_FAILED ? NULL : p;
}

/** Undoes sp_bytes_map. */
static inline void sp_bytes_unmap(const void *mapping, size_t length) {
    if (length > 0 && mapping) munmap((void *)mapping, length);
}

#ifdef __cplusplus
}
#endif

#endif /* SP_BYTES_H */
