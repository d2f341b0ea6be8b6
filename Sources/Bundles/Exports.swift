/// The bundle model's values (manifests, versions) come with this module: code that reads bundles
/// from disk uses them as if they were its own.
@_exported import BundleModel
