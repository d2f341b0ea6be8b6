import Bundles
import LinuxSupport
import PluginInstall
#if canImport(Glibc)
import Glibc
#endif

/// `supervisor-installer keygen|pubkey|sign|publish`: what a plugin publisher needs to sign archives
/// and catalogs, and to publish a bundle to a fleet in one step (docs/install.md#publishing-for-a-fleet).
/// Run by hand; the supervisor never passes arguments.
enum PublisherCommands {
    static let usage = """
        usage: supervisor-installer keygen <private-key-file>     writes a new private key (mode 0600), prints the public key
               supervisor-installer pubkey <private-key-file>     prints the public key, for trustedKeys
               supervisor-installer sign <file> --key <private-key-file>
                                                                  prints the base64 signature of <file>: an archive's <file>.sig,
                                                                  or one line of a catalog's <catalog>.sig (one line per key)
               supervisor-installer publish <bundle-folder> --key <private-key-file> --catalog <catalog.json>
                                    [--base-url URL] [--expires DAYS] [--on-demand | --no-on-demand]
                                                                  packs the bundle into <identifier>-<version>.tar.gz beside the
                                                                  catalog, signs it, and adds it to the catalog (created if new,
                                                                  else signed by the same key): version raised, expires set
                                                                  (DAYS, default 7), length and sha256 filled, catalog re-signed

        """

    static func run(_ args: [String]) -> Never {
        do {
            switch args.first {
            case "keygen" where args.count == 2:
                let path = args[1]
                guard !FileSystem.exists(path) else { return fail("\(path) exists; not overwriting a key") }
                let (privateKey, publicKey) = Publishing.generateKey()
                let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
                guard fd >= 0 else { return fail("cannot create \(path): \(String(cString: strerror(errno)))") }
                let text = privateKey + "\n"
                _ = text.withCString { write(fd, $0, strlen($0)) }
                close(fd)
                print(publicKey)
            case "pubkey" where args.count == 2:
                print(try Publishing.publicKey(of: String(decoding: try FileSystem.readFile(args[1], limit: 4096), as: UTF8.self)))
            case "sign" where args.count == 4 && args[2] == "--key":
                let key = String(decoding: try FileSystem.readFile(args[3], limit: 4096), as: UTF8.self)
                let bytes = try FileSystem.readFile(args[1], limit: 1 << 30)
                print(try Publishing.sign(bytes, privateKey: key))
            case "publish":
                publish(Array(args.dropFirst()))
            case "-h", "--help", "help":
                StandardError.write(usage)
                exit(0)
            default:
                return fail("unknown command\n" + usage)
            }
            exit(0)
        } catch {
            fail("\(error)")
        }
    }

    /// `publish <bundle-folder> --key K --catalog C [--base-url URL] [--expires DAYS] [--on-demand|--no-on-demand]`.
    static func publish(_ args: [String]) -> Never {
        var bundle: String?
        var key: String?, catalog: String?, baseURL: String?, expires = 7
        var onDemand: Bool?
        var i = 0
        func value(_ option: String) -> String {
            i += 1
            guard i < args.count, !args[i].hasPrefix("--") else { usageError("\(option) needs a value") }
            return args[i]
        }
        while i < args.count {
            switch args[i] {
            case "--key": key = value("--key")
            case "--catalog": catalog = value("--catalog")
            case "--base-url": baseURL = value("--base-url")
            case "--expires":
                let text = value("--expires")
                guard let days = Int(text) else { usageError("--expires '\(text)' is not a whole number of days") }
                expires = days
            case "--on-demand": onDemand = true
            case "--no-on-demand": onDemand = false
            case let option where option.hasPrefix("-"): usageError("publish: unknown option \(option)")
            case let folder:
                guard bundle == nil else { usageError("publish takes one bundle folder; got \(bundle!) and \(folder)") }
                bundle = folder
            }
            i += 1
        }
        guard let bundle else { usageError("publish needs a bundle folder") }
        guard let key else { usageError("publish needs --key <private-key-file> (supervisor-installer keygen makes one)") }
        guard let catalog else { usageError("publish needs --catalog <catalog.json> (made if it does not exist)") }
        if let problem = CatalogPublisher.problem(baseURL: baseURL, expiresDays: expires) { usageError(problem) }
        var publisher = CatalogPublisher(catalog: catalog, keyFile: key)
        publisher.baseURL = baseURL
        publisher.expiresDays = expires
        publisher.onDemand = onDemand
        do {
            let p = try publisher.publish(bundle: bundle)
            print("published \(p.identifier) \(p.version)" + (p.previous.map { $0 == p.version ? " again" : " (the catalog had \($0))" } ?? " (new in the catalog)"))
            print("  archive  \(p.archive) (\(p.length) bytes, sha256 \(p.sha256)) and its .sig")
            print("  url      \(p.url)")
            print("  catalog  \(FileSystem.absolute(catalog)): version \(p.catalogVersion), expires \(p.expires), \(p.plugins) plugin(s); signed in its .sig")
            exit(0)
        } catch let error as InstallError {
            fail("publish: \(error.code.rawValue): \(error.message)")
        } catch {
            fail("publish: \(error)")
        }
    }

    static func usageError(_ message: String) -> Never {
        StandardError.write("supervisor-installer: \(message)\n" + usage)
        exit(64)
    }

    static func fail(_ message: String) -> Never {
        StandardError.write("supervisor-installer: \(message)\n")
        exit(2)
    }
}
