// supervisor-installer: downloads, checks, unpacks and preflights plugin archives for the supervisor
// (and the CLI offline), in a process of its own so that libcurl and libarchive never parse untrusted
// input inside the supervisor. The request comes as JSON in $SP_INSTALL_REQUEST; every output line
// is one JSON object: progress on the way, then exactly one `staged`, `catalog`, `fetched` or `error`.
import Bundles
import LinuxSupport
import PluginInstall
import PluginProtocol
#if canImport(Glibc)
import Glibc
#endif

signal(SIGPIPE, SIG_IGN)
// Run by hand, with arguments: the publisher's tools (keys and signatures), nothing else.
if CommandLine.arguments.count > 1 { PublisherCommands.run(Array(CommandLine.arguments.dropFirst())) }
try? ProcessControl.dieWithParent()  // the supervisor gone: nobody is waiting for this install

func emit(_ line: InstallerLine) {
    guard var bytes = try? ProtocolJSON.encode(line) else { return }
    bytes.append(0x0A)
    _ = bytes.withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
}

func fail(_ error: InstallError) -> Never {
    var line = InstallerLine()
    line.error = error.body
    emit(line)
    exit(1)
}

/// Every failure keeps a code of its own through to the CLI (InstallError.Code).
func classify(_ error: any Error) -> InstallError {
    switch error {
    case let e as InstallError: return e
    case let e as ManifestError: return InstallError(.invalidManifest, e.description)
    case let e as VariantSelector.NoMatch: return InstallError(.conflict, e.description)
    case let e as SystemError: return InstallError(.fileSystem, e.description)
    default: return InstallError(.internalError, "\(error)")
    }
}

/// The configured keys: trusted (some with an expiry) and revoked.
func integrity(_ request: InstallRequest) throws -> Integrity {
    try Integrity(trustedKeys: request.trustedKeys ?? [], expiries: request.keyExpiries ?? [:], revoked: request.revokedKeys ?? [])
}

guard let raw = getenv(InstallRequest.environmentVariable),
      let request = try? ProtocolJSON.decode(InstallRequest.self, from: Array(String(cString: raw).utf8)) else {
    fail(InstallError(.internalError, "supervisor-installer is run by the supervisor with a request in $\(InstallRequest.environmentVariable)"))
}

// Confined before any untrusted byte is read; the first line says how.
do {
    let confined = try InstallerSandbox.apply(request)
    var line = InstallerLine()
    line.sandbox = confined.layers
    line.sandboxMissing = confined.missing
    emit(line)
} catch {
    // A folder it could not make (a full disk, a read-only home) is the disk's fault, not a bug.
    let disk = error.code.map { [ENOSPC, EDQUOT, EROFS, EIO, EACCES, EPERM].contains($0) } ?? false
    fail(InstallError(disk ? .fileSystem : .internalError, "the installer cannot confine itself: \(error)"))
}

var fetcher = Fetcher()
fetcher.lowSpeedSeconds = request.lowSpeedSeconds
fetcher.maxBytes = Int64(request.maxBytes)

do {
    var line = InstallerLine()
    switch request.operation {
    case .stage:
        guard let source = request.source else { fail(InstallError(.internalError, "stage needs a source")) }
        var stager = try Stager(home: request.home, trustedKeys: request.trustedKeys ?? [],
                                workerExecutable: request.workerExecutable ?? "", runtimePaths: request.runtimePaths ?? [])
        stager.integrity = try integrity(request)
        stager.fetcher = fetcher
        stager.extractor.maxTotalBytes = Int64(request.maxBytes) * 2
        stager.sandbox = request.sandbox ?? true
        stager.otherBundles = request.otherBundles ?? [:]
        line.staged = try stager.stage(source: source, entry: request.entry, force: request.force ?? false,
                                       allowUnsigned: request.allowUnsigned ?? false, progress: { stage, done, total in
            var p = InstallerLine()
            p.progress = .init(stage: stage, done: done, total: total)
            emit(p)
        }, spawned: { pid in
            var p = InstallerLine()
            p.preflightPID = pid
            emit(p)
        })
    case .catalog:
        guard let url = request.url else { fail(InstallError(.internalError, "catalog needs a url")) }
        var catalog = CatalogFetch(url: url, home: request.home, integrity: try integrity(request))
        catalog.signaturesOptional = request.catalogSignaturesOptional ?? false
        catalog.fetcher.lowSpeedSeconds = request.lowSpeedSeconds
        line.catalog = try catalog.load()
    case .fetch:
        guard let url = request.url, let destination = request.destination else { fail(InstallError(.internalError, "fetch needs a url and a destination")) }
        switch try fetcher.fetch(url, to: destination, conditional: .init(etag: request.etag, lastModified: request.lastModified)) {
        case .notModified: line.fetched = Fetched(notModified: true, etag: request.etag, lastModified: request.lastModified)
        case .downloaded(_, let etag, let lastModified): line.fetched = Fetched(notModified: false, etag: etag, lastModified: lastModified)
        }
    case .probe:
        line.probed = InstallerSandbox.probe(request.paths ?? [])
    }
    emit(line)
} catch {
    fail(classify(error))
}
