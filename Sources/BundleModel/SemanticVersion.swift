/// A Semantic Versioning 2.0.0 version: `MAJOR.MINOR.PATCH[-pre][+build]`, build metadata ignored in
/// comparisons, pre-releases ordered below their release (1.0.0-alpha < 1.0.0, alpha.2 < alpha.10).
public struct SemanticVersion: Comparable, Hashable, Sendable, CustomStringConvertible {
    public var major: UInt64
    public var minor: UInt64
    public var patch: UInt64
    public var prerelease: [String]
    public var build: [String]

    public init(_ major: UInt64, _ minor: UInt64, _ patch: UInt64, prerelease: [String] = [], build: [String] = []) {
        self.major = major
        self.minor = minor
        self.patch = patch
        self.prerelease = prerelease
        self.build = build
    }

    /// Parses strictly: three numeric parts without leading zeros, identifiers of `[0-9A-Za-z-]`.
    public init?(_ text: String) {
        var rest = Substring(text)
        var build: [String] = []
        if let plus = rest.firstIndex(of: "+") {
            build = rest[rest.index(after: plus)...].split(separator: ".", omittingEmptySubsequences: false).map(String.init)
            guard !build.isEmpty, build.allSatisfy({ !$0.isEmpty && Self.isIdentifier($0) }) else { return nil }
            rest = rest[..<plus]
        }
        var pre: [String] = []
        if let dash = rest.firstIndex(of: "-") {
            pre = rest[rest.index(after: dash)...].split(separator: ".", omittingEmptySubsequences: false).map(String.init)
            guard !pre.isEmpty, pre.allSatisfy({ !$0.isEmpty && Self.isIdentifier($0) }) else { return nil }
            for p in pre where p.allSatisfy(\.isNumber) && p.count > 1 && p.hasPrefix("0") { return nil }
            rest = rest[..<dash]
        }
        let parts = rest.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { return nil }
        var numbers: [UInt64] = []
        for part in parts {
            guard !part.isEmpty, part.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
                  !(part.count > 1 && part.hasPrefix("0")), let n = UInt64(part) else { return nil }
            numbers.append(n)
        }
        self.init(numbers[0], numbers[1], numbers[2], prerelease: pre, build: build)
    }

    static func isIdentifier(_ s: String) -> Bool {
        s.utf8.allSatisfy { c in
            (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || c == UInt8(ascii: "-")
        }
    }

    public var description: String {
        var s = "\(major).\(minor).\(patch)"
        if !prerelease.isEmpty { s += "-" + prerelease.joined(separator: ".") }
        if !build.isEmpty { s += "+" + build.joined(separator: ".") }
        return s
    }

    public static func == (a: SemanticVersion, b: SemanticVersion) -> Bool {
        a.major == b.major && a.minor == b.minor && a.patch == b.patch && a.prerelease == b.prerelease
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(major)
        hasher.combine(minor)
        hasher.combine(patch)
        hasher.combine(prerelease)
    }

    public static func < (a: SemanticVersion, b: SemanticVersion) -> Bool {
        if a.major != b.major { return a.major < b.major }
        if a.minor != b.minor { return a.minor < b.minor }
        if a.patch != b.patch { return a.patch < b.patch }
        switch (a.prerelease.isEmpty, b.prerelease.isEmpty) {
        case (true, true), (true, false): return false
        case (false, true): return true
        case (false, false): break
        }
        for (x, y) in zip(a.prerelease, b.prerelease) where x != y {
            switch (UInt64(x), UInt64(y)) {
            case let (nx?, ny?): return nx < ny
            case (.some, nil): return true
            case (nil, .some): return false
            case (nil, nil): return x < y
            }
        }
        return a.prerelease.count < b.prerelease.count
    }
}

/// A version requirement: space-separated comparators that must all hold (`>=1.2.0 <2.0.0`),
/// with `^1.2.0`, `~1.2.0`, `=1.2.0`, a bare version (exact) and `*`.
public struct VersionRange: Sendable, CustomStringConvertible {
    enum Op: String { case ge = ">=", le = "<=", gt = ">", lt = "<", eq = "=" }
    let comparators: [(Op, SemanticVersion)]
    public let text: String

    public init?(_ text: String) {
        self.text = text
        var out: [(Op, SemanticVersion)] = []
        for token in text.split(separator: " ") {
            var t = Substring(token)
            if t == "*" { continue }
            if t.hasPrefix("^") || t.hasPrefix("~") {
                let caret = t.hasPrefix("^")
                guard let v = SemanticVersion(String(t.dropFirst())) else { return nil }
                out.append((.ge, v))
                // The next major (caret; minor or patch below 1.0.0) or minor (tilde) is the upper
                // bound; a component already at its largest has none (found by FuzzManifest:
                // `^18446744073709551615.0.0` overflowed and trapped).
                func next(_ n: UInt64) -> UInt64? {
                    let (sum, overflow) = n.addingReportingOverflow(1)
                    return overflow ? nil : sum
                }
                let upper: SemanticVersion?
                if caret {
                    upper = v.major > 0 ? next(v.major).map { SemanticVersion($0, 0, 0) } :
                        (v.minor > 0 ? next(v.minor).map { SemanticVersion(0, $0, 0) } : next(v.patch).map { SemanticVersion(0, 0, $0) })
                } else {
                    upper = next(v.minor).map { SemanticVersion(v.major, $0, 0) }
                }
                if let upper { out.append((.lt, upper)) }
                continue
            }
            var op = Op.eq
            for candidate in [Op.ge, .le, .gt, .lt, .eq] where t.hasPrefix(candidate.rawValue) {
                op = candidate
                t = t.dropFirst(candidate.rawValue.count)
                break
            }
            guard let v = SemanticVersion(String(t)) else { return nil }
            out.append((op, v))
        }
        comparators = out
    }

    public func contains(_ v: SemanticVersion) -> Bool {
        comparators.allSatisfy { op, bound in
            switch op {
            case .ge: return v >= bound
            case .le: return v <= bound
            case .gt: return v > bound
            case .lt: return v < bound
            case .eq: return v == bound
            }
        }
    }

    public var description: String { text }
}
