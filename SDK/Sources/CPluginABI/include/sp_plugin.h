/*
 * sp_plugin.h — the native ABI between a sandboxed worker and the plugin library it loads.
 *
 * A plugin is a shared library that exports one symbol, `sp_plugin_create`. The worker process
 * (already sandboxed) dlopens the library, calls sp_plugin_create with an sp_host, and from then on
 * exchanges JSON messages with the plugin: exactly the wire protocol's objects (docs/protocol.md),
 * without the 4-byte length prefix.
 *
 * Threading contract
 *   - `receive` is called on the worker's I/O thread, one message at a time. It must return quickly:
 *     a plugin that needs time answers later, from any thread, with host->send. A receive that
 *     blocks holds up every later message to this plugin (and, once the watchdog is on, gets the
 *     worker killed).
 *   - host->send is thread-safe and may be called from any thread at any time until `destroy`
 *     returns. It copies the bytes before returning. Sent from inside `receive`, a message to the
 *     supervisor is written together with the others sent while the same read's messages are
 *     delivered, before the I/O thread reads again (docs/abi.md, "Threading contract").
 *   - `destroy` is called once, when the worker shuts down, after the last `receive`.
 *
 * Build a plugin in C:  cc -shared -fPIC -I<this folder> -o libmyplugin.so myplugin.c
 */
#ifndef SP_PLUGIN_H
#define SP_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The ABI version this header describes. The worker refuses a plugin that reports another. */
#define SP_ABI_VERSION 1

/** Given to the plugin by the worker. Valid until the plugin's `destroy` returns. */
typedef struct sp_host {
    uint32_t abi_version;
    void *ctx;
    /* Hand one JSON message to the supervisor. Thread-safe; may be called from any thread, any time.
       Returns 0, or a negative errno (-EINVAL for an empty message, -EMSGSIZE over the frame limit,
       -EBADF when its attachments name a descriptor the process does not hold: nothing is sent,
       -EPIPE once the supervisor is gone). */
    int (*send)(void *ctx, const uint8_t *json, size_t len);
} sp_host;

/** Returned by the plugin. Must stay valid until `destroy` returns. */
typedef struct sp_plugin {
    uint32_t abi_version;
    void *ctx;
    /* Deliver one JSON message from the supervisor. The plugin answers requests with host->send,
       now or later, from any thread. The bytes are only valid during the call. */
    void (*receive)(void *ctx, const uint8_t *json, size_t len);
    void (*destroy)(void *ctx);
} sp_plugin;

/** The one symbol every plugin library exports. NULL means the plugin could not start. */
const sp_plugin *sp_plugin_create(const sp_host *host);

/** The type of sp_plugin_create, for dlsym. */
typedef const sp_plugin *(*sp_plugin_create_fn)(const sp_host *host);

#ifdef __cplusplus
}
#endif

#endif /* SP_PLUGIN_H */
