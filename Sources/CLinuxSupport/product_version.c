/* The product's version, stamped in every binary as one string in the what(1) convention
 * ("@(#)sandboxed-plugins <version>", with room after it), read at run time: a test of the
 * upgrade in place makes "a build with another version string" by changing these bytes in a copy
 * of the binary, and `what supervisor` or `strings` shows which version a file is. Raised with each
 * release (docs/operations.md, "Packaging"). */
#include "linux_support.h"

static const char stamp[64] = "@(#)sandboxed-plugins 0.4.0";

const char *cls_product_version(void) {
    /* Through a volatile pointer: the optimizer cannot fold the version into the code that uses it. */
    const char *volatile at = stamp;
    return at + sizeof "@(#)sandboxed-plugins " - 1;
}
