/* The C ABI's module for Swift (an umbrella header, so a header added here is seen by a build
   that already cached the module): sp_plugin.h, the plugin interface, and sp_bytes.h, the
   helpers for bytes passed as sealed memfds. C plugins include those two directly. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create (sp_bytes.h), before the first system header */
#endif
#include "sp_plugin.h"
#include "sp_bytes.h"
