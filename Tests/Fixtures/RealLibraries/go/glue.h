// The ABI comes from the SDK's header; the glue adds the one call cgo cannot make (host->send).
#include "sp_plugin.h"

int glue_send(const uint8_t *json, size_t len);
