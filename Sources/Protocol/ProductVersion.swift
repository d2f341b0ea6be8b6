/// This build's version: `supervisor --version` prints it, the Debian package takes it
/// (scripts/package-deb.sh). Raised with each release (docs/operations.md, "Packaging").
public enum ProductVersion {
    public static let current = "0.4.0"
}
