#include <stddef.h>
#include <stdint.h>

typedef struct sp_host {
    uint32_t abi_version;
    void *ctx;
    int (*send)(void *ctx, const uint8_t *json, size_t len);
} sp_host;

typedef struct sp_plugin {
    uint32_t abi_version;
    void *ctx;
    void (*receive)(void *ctx, const uint8_t *json, size_t len);
    void (*destroy)(void *ctx);
} sp_plugin;

void glue_set_host(const sp_host *host);
const sp_plugin *glue_plugin(void);
int glue_send(const uint8_t *json, size_t len);
