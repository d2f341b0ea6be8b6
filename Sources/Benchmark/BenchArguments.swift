import Foundation

/// The benchmark's arguments, checked before anything runs: `--help` prints what it takes, and an
/// argument it does not know (or a section it has not) is refused instead of being ignored by a
/// run of every section.
enum BenchArguments {
    static let sections = ["calls", "sdk", "client", "host", "streams", "bytes", "crash", "upgrade", "startup", "scale", "soak"]
    static let flags: Set = ["--json", "--quick", "--no-peer-links", "--links"]
    /// Options and how many values follow each.
    static let options = ["--only": 1, "--worker-start": 1, "--link-poll-us": 1, "--baseline-lib": 1, "--rounds": 1,
                          "--plugins": 1, "--minutes": 1, "--go-plugin": 2]

    static let usage = """
        usage: supervisor-bench [--json] [--quick] [--only SECTION] [--worker-start exec|fork-server]
                                [--no-peer-links] [--link-poll-us N]
          sections: \(sections.joined(separator: ", ")) (all but sdk, scale and soak when --only is not given)
          --only sdk [--baseline-lib PATH] [--rounds N]
          --only scale [--plugins N] [--go-plugin HOST PLUGIN]
          --only soak [--minutes N] [--links]
        Every figure stands beside a baseline measured in the same run (docs/benchmarks.md).
        """

    static func check(_ arguments: [String]) {
        var i = 1
        while i < arguments.count {
            let a = arguments[i]
            if a == "--help" || a == "-h" {
                print(usage)
                exit(0)
            }
            if flags.contains(a) {
                i += 1
            } else if let count = options[a] {
                let values = count == 1 ? "a value" : "\(count) values"
                guard i + count < arguments.count else { refuse("\(a) takes \(values)") }
                if a == "--only", !sections.contains(arguments[i + 1]) { refuse("no section '\(arguments[i + 1])'") }
                i += 1 + count
            } else {
                refuse("unknown argument '\(a)'")
            }
        }
    }

    private static func refuse(_ why: String) -> Never {
        FileHandle.standardError.write(Data("supervisor-bench: \(why)\n\(usage)\n".utf8))
        exit(64)
    }
}
