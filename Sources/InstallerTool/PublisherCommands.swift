import Bundles
import LinuxSupport
import PluginInstall
#if canImport(Glibc)
import Glibc
#endif

/// `supervisor-installer keygen|pubkey|sign`: what a plugin publisher needs to sign archives and
/// catalogs (docs/install.md#publishing). Run by hand; the supervisor never passes arguments.
enum PublisherCommands {
    static let usage = """
        usage: supervisor-installer keygen <private-key-file>     writes a new private key (mode 0600), prints the public key
               supervisor-installer pubkey <private-key-file>     prints the public key, for trustedKeys
               supervisor-installer sign <file> --key <private-key-file>
                                                                  prints the base64 signature of <file>: an archive's <file>.sig,
                                                                  or one line of a catalog's <catalog>.sig (one line per key)

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

    static func fail(_ message: String) -> Never {
        StandardError.write("supervisor-installer: \(message)\n")
        exit(2)
    }
}
