import Bundles
import CInstallSupport
import LinuxSupport
#if canImport(Glibc)
import Glibc
#endif

/// Downloads with libcurl (http, https, file): redirects to http(s) only and bounded, a size cap
/// enforced during the transfer, a low-speed abort for servers that stall or trickle, and
/// conditional requests (ETag / If-Modified-Since).
public struct Fetcher: Sendable {
    public var maxBytes: Int64 = 256 << 20
    public var maxRedirects = 5
    public var connectTimeoutSeconds = 10
    /// A transfer slower than `lowSpeedBytes` per second for `lowSpeedSeconds` is aborted.
    public var lowSpeedBytes = 1024
    public var lowSpeedSeconds = 15
    public var totalTimeoutSeconds = 600

    public init() {}

    public struct Conditional: Sendable {
        public var etag: String?
        public var lastModified: String?
        public init(etag: String? = nil, lastModified: String? = nil) {
            self.etag = etag
            self.lastModified = lastModified
        }
    }

    public enum Outcome: Sendable {
        /// The body was written to the file; its validators for next time.
        case downloaded(bytes: Int64, etag: String?, lastModified: String?)
        case notModified
    }

    /// A failed download: `downloadFailed`, naming the URL.
    static func failure(url: String, reason: String) -> InstallError {
        InstallError(.downloadFailed, "downloading \(url) failed: \(reason)")
    }

    /// Fetches `url` into a new file at `path` (replaced if it exists). A failed fetch removes it.
    public func fetch(_ url: String, to path: String, conditional: Conditional = Conditional(),
                      progress: ((Int64, Int64) -> Void)? = nil) throws(InstallError) -> Outcome {
        guard let outcome = try fetch(url, to: path, conditional: conditional, progress: progress, absentIsNil: false) else {
            throw Self.failure(url: url, reason: "nothing is there")
        }
        return outcome
    }

    /// Fetches `url` if anything is published there: nil when the server answers that nothing is
    /// (HTTP 404 or 410; a `file://` URL's file does not exist). Any other failure throws, as `fetch`.
    public func fetchIfPublished(_ url: String, to path: String) throws(InstallError) -> Outcome? {
        try fetch(url, to: path, conditional: Conditional(), progress: nil, absentIsNil: true)
    }

    private func fetch(_ url: String, to path: String, conditional: Conditional, progress: ((Int64, Int64) -> Void)?,
                       absentIsNil: Bool) throws(InstallError) -> Outcome? {
        Self.initialize
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw Self.failure(url: url, reason: "cannot create \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        final class Box { let progress: ((Int64, Int64) -> Void)?; init(_ p: ((Int64, Int64) -> Void)?) { progress = p } }
        let box = Box(progress)
        var result = cis_fetch_result()
        let etag = conditional.etag ?? ""
        let lastModified = conditional.lastModified ?? ""
        etag.withCString { etagC in
            lastModified.withCString { lmC in
                var options = cis_fetch_options(
                    max_bytes: maxBytes, max_redirects: maxRedirects, connect_timeout_s: connectTimeoutSeconds,
                    low_speed_limit: lowSpeedBytes, low_speed_time_s: lowSpeedSeconds, total_timeout_s: totalTimeoutSeconds,
                    if_none_match: etag.isEmpty ? nil : etagC, if_modified_since: lastModified.isEmpty ? nil : lmC,
                    progress: progress == nil ? nil : { ctx, now, total in
                        Unmanaged<Box>.fromOpaque(ctx!).takeUnretainedValue().progress?(now, total)
                    },
                    progress_ctx: Unmanaged.passUnretained(box).toOpaque())
                cis_fetch(url, fd, &options, &result)
            }
        }
        withExtendedLifetime(box) {}
        func text<T>(_ tuple: T) -> String {
            withUnsafeBytes(of: tuple) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        }
        let failed: String?
        // CURLE_FILE_COULDNT_READ_FILE (37) for a file:// URL whose file is not there (and not for
        // one that is there but cannot be read: that is a failure like any other).
        let absent = [404, 410].contains(result.http_status)
            || (result.http_status == 0 && result.curl_code == 37 && url.hasPrefix("file://") && !Self.fileURLExists(url))
        if absentIsNil, absent {
            unlink(path)
            return nil
        } else if result.too_large != 0 {
            failed = "larger than the limit of \(maxBytes) bytes"
        } else if result.curl_code != 0 {
            failed = text(result.error)
        } else if result.http_status == 304 && !(etag.isEmpty && lastModified.isEmpty) {
            unlink(path)
            return .notModified
        } else if result.http_status == 304 {
            // "Not modified" answers a condition, and none was sent: there is no copy here that
            // the answer could mean (a file of another URL, or none at all).
            failed = "the server answered HTTP 304 (not modified) to a request that named no version it could mean"
        } else if result.http_status != 0 && !(200..<300).contains(result.http_status) {
            failed = "the server answered HTTP \(result.http_status)"
        } else {
            failed = nil
        }
        if let failed {
            unlink(path)
            throw Self.failure(url: url, reason: failed)
        }
        guard fsync(fd) == 0 else { throw Self.failure(url: url, reason: "fsync failed: \(String(cString: strerror(errno)))") }
        let e = text(result.etag), lm = text(result.last_modified)
        return .downloaded(bytes: result.bytes, etag: e.isEmpty ? nil : e, lastModified: lm.isEmpty ? nil : lm)
    }

    private static let initialize: Void = { cis_curl_global_init() }()

    /// Whether the file a `file://` URL names exists (its path as written: curl takes no
    /// escapes there either).
    private static func fileURLExists(_ url: String) -> Bool {
        var path = url.dropFirst("file://".count)
        if path.hasPrefix("localhost/") { path = path.dropFirst("localhost".count) }
        var st = stat()
        return lstat(String(path), &st) == 0 || errno != ENOENT
    }
}
