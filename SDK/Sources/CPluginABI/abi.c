/* The ABI is a header only; this file gives the target something to compile. */
#include "sp_plugin.h"
