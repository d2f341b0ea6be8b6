import CLinuxSupport

/// This build's version: `supervisor --version` prints it, the Debian package takes it
/// (scripts/package-deb.sh). It lives in the binary as the stamp "@(#)sandboxed-plugins <version>"
/// (Sources/CLinuxSupport/product_version.c, raised with each release: docs/operations.md,
/// "Packaging"), so that a copy of a binary can be given another version without a rebuild (the
/// upgrade tests do).
public enum ProductVersion {
    public static let current = String(cString: cls_product_version())
}
