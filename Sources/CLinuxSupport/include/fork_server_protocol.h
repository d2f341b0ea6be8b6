#ifndef FORK_SERVER_PROTOCOL_H
#define FORK_SERVER_PROTOCOL_H
/* The fork server's messages (docs/sandbox.md, "The fork server"). One SOCK_SEQPACKET socketpair,
   descriptor 3 of the fork server, the other end the supervisor's alone: one message is one
   request or one answer. Both ends are this machine's processes, so the structs travel as they
   are. Used by the fork server (Sources/ForkServer) and the supervisor's side (linux_support.c). */
#include <stdint.h>

#define FS_MAGIC 0x53504653u /* "SPFS" */

/* Flags of a request. */
#define FS_ISOLATED 1u /* new user and PID namespaces (the worker is PID 1 of its own) */
#define FS_DESCRIPTOR_CHANNEL 2u /* a fourth descriptor: the worker's descriptor channel, descriptor 4 */
/* With FS_ISOLATED: the worker may start in an empty network namespace the fork server made
   ahead, instead of making one itself: where Landlock scopes abstract Unix sockets, the one the
   server made at its start for every worker without `network`; otherwise one of its own, made
   while the server was idle (SP_FORKSERVER_NETNS of them at most). It is never the supervisor's;
   the worker tells by comparing it with the supervisor's (WorkerSpec.hostNetworkNamespace) and
   unshares one itself when it was not given. */
#define FS_EMPTY_NETWORK 4u
/* One more descriptor, after the others: the worker's payload channel, descriptor 5 (the memfds of
   bytes attached to messages, docs/protocol.md "Bytes"). */
#define FS_PAYLOAD_CHANNEL 8u
/* With FS_PAYLOAD_CHANNEL, one more after it: the worker's taken page, descriptor 6 (SPEC §15). */
#define FS_TAKEN_PAGE 16u

/* supervisor -> fork server: start a worker. Followed by `env_bytes` bytes holding `env_count`
   NUL-terminated "NAME=value" strings (its whole environment); SCM_RIGHTS carries the protocol
   socket (to become descriptor 3), its stdout and stderr (1, 2) and, with FS_DESCRIPTOR_CHANNEL,
   the descriptor channel (4: the seccomp listener, the cgroup word, peer-link orders) and, with
   FS_PAYLOAD_CHANNEL, the payload channel (5) and, with FS_TAKEN_PAGE, the taken page (6). */
struct fs_request {
    uint32_t magic;
    uint32_t flags;
    uint32_t env_count;
    uint32_t env_bytes;
};

/* fork server -> supervisor: the first message (`pid` is the fork server's own, `micros` how long
   loading the worker's library took), then one per request (`pid` the worker's, in the
   supervisor's PID namespace; `micros` how long the fork took). `error` is 0 or an errno value;
   `threads` is the fork server's thread count when it answered (it forks only at 1). Followed by
   an optional message (not NUL-terminated) saying what failed. */
struct fs_reply {
    uint32_t magic;
    int32_t pid;
    int32_t error;
    int32_t threads;
    int64_t micros;
};

/* The longest request the fork server reads (header and environment). */
#define FS_MAX_REQUEST (256 * 1024)
#define FS_MAX_MESSAGE 512
#endif
