import PluginProtocol

/// `status`'s answer written directly: the same JSON Foundation's encoder writes for
/// `[PluginStatus]` (keys sorted, slashes not escaped, absent optionals left out but for the four
/// SPEC §6 names, which are `null`: `PluginStatus.encode(to:)`), at a fraction of
/// its cost. With 1,000 plugins the answer is ~850 KB, and the encoder's generic walk took most of
/// `status --json`'s time. `PluginStatusJSONTests` holds the two byte for byte equal, and fails
/// when a property is added to `PluginStatus` and not written here.
extension PluginStatus {
    /// The JSON of `list`, as the control socket answers `status`.
    public static func json(_ list: [PluginStatus]) -> [UInt8] {
        var out = JSONWriter()
        out.bytes.reserveCapacity(list.count * 900 + 2)
        out.beginArray()
        for status in list { status.write(to: &out) }
        out.endArray()
        return out.bytes
    }

    /// `status`'s answer to a supervisor asked it again and again (a dashboard polling, `watch
    /// supervisor status`, a health check): `json(_:)`'s bytes, but each plugin's object is kept
    /// with the status it was written from and written again only when that status changed. At
    /// 1,000 running plugins nearly all are unchanged from one answer to the next, and comparing
    /// is cheap then: the arrays and dictionaries a status holds share their storage with the
    /// plugin's record, and Swift compares shared storage by identity, not element by element.
    package struct Answers {
        /// The last answer's objects, by identifier (a plugin no longer listed is forgotten).
        private var objects: [String: (status: PluginStatus, json: [UInt8])] = [:]

        package init() {}

        package mutating func json(_ list: [PluginStatus]) -> [UInt8] {
            var out = JSONWriter()
            out.bytes.reserveCapacity(list.count * 900 + 2)
            var kept: [String: (status: PluginStatus, json: [UInt8])] = [:]
            kept.reserveCapacity(list.count)
            out.beginArray()
            for status in list {
                if let known = objects[status.identifier], known.status == status {
                    out.element(written: known.json)
                    kept[status.identifier] = known
                } else {
                    kept[status.identifier] = (status, out.element { status.write(to: &$0) })
                }
            }
            out.endArray()
            objects = kept
            return out.bytes
        }
    }

    /// One plugin's object.
    public func json() -> [UInt8] {
        var out = JSONWriter()
        write(to: &out)
        return out.bytes
    }

    /// Its members in sorted order, as the encoder's `.sortedKeys` writes them.
    fileprivate func write(to o: inout JSONWriter) {
        o.beginObject()
        if let debug { o.bool("debug", debug) }
        o.strings("dependencies", dependencies)
        if let error { o.string("error", error) }
        o.string("identifier", identifier)
        if let lastError { o.string("lastError", lastError) } else { o.null("lastError") }
        if let lastExit {
            o.key("lastExit")
            o.beginObject()
            if let code = lastExit.code { o.int("code", Int(code)) }
            if let message = lastExit.message { o.string("message", message) }
            o.string("reason", lastExit.reason.rawValue)
            if let signal = lastExit.signal { o.string("signal", signal) }
            if let syscall = lastExit.syscall { o.string("syscall", syscall) }
            o.endObject()
        } else {
            o.null("lastExit")
        }
        if let links { o.strings("links", links) }
        if let pid { o.int("pid", Int(pid)) } else { o.null("pid") }
        o.int("restarts", restarts)
        o.strings("sandbox", sandbox)
        if let sandboxDenials { o.counts("sandboxDenials", sandboxDenials) }
        if let sandboxMissing { o.strings("sandboxMissing", sandboxMissing) }
        if let standbyPid { o.int("standbyPid", Int(standbyPid)) }
        o.string("state", state)
        if let supervisorVersion { o.string("supervisorVersion", supervisorVersion) }
        if let timings { o.counts("timings", timings) }
        if let updating {
            o.key("updating")
            o.beginObject()
            o.int("pid", Int(updating.pid))
            o.string("version", updating.version)
            o.endObject()
        }
        if let variant { o.string("variant", variant) } else { o.null("variant") }
        o.string("version", version)
        if let workerStart { o.string("workerStart", workerStart) }
        if let workerStartProblem { o.string("workerStartProblem", workerStartProblem) }
        o.endObject()
    }
}

/// A JSON text written front to back, for answers the supervisor writes often and large. The
/// caller writes an object's members in the order it wants them (sorted, to match the encoder).
package struct JSONWriter {
    var bytes: [UInt8] = []
    /// A value was just written in the array or object open now: the next one needs a comma.
    private var afterValue = false

    mutating func beginObject() { open("{") }
    mutating func endObject() { close("}") }
    mutating func beginArray() { open("[") }
    mutating func endArray() { close("]") }

    /// The next element of the array open now: JSON this writer wrote earlier (`element(_:)`).
    mutating func element(written json: [UInt8]) {
        if afterValue { raw(",") }
        bytes += json
        afterValue = true
    }

    /// The next element of the array open now, written by `write`; also returned on its own.
    mutating func element(_ write: (inout JSONWriter) -> Void) -> [UInt8] {
        if afterValue { raw(",") }
        afterValue = false
        let start = bytes.count
        write(&self)
        return Array(bytes[start...])
    }

    mutating func key(_ name: StaticString) {
        if afterValue { raw(",") }
        raw("\"")
        raw(name)
        raw("\":")
        afterValue = false
    }

    mutating func string(_ name: StaticString, _ value: String) {
        key(name)
        string(value)
    }

    mutating func int(_ name: StaticString, _ value: Int) {
        key(name)
        bytes.append(contentsOf: String(value).utf8)
        afterValue = true
    }

    mutating func null(_ name: StaticString) {
        key(name)
        raw("null")
        afterValue = true
    }

    mutating func bool(_ name: StaticString, _ value: Bool) {
        key(name)
        value ? raw("true") : raw("false")
        afterValue = true
    }

    mutating func strings(_ name: StaticString, _ values: [String]) {
        key(name)
        beginArray()
        for value in values { string(value) }
        endArray()
    }

    /// A dictionary of counts, its keys sorted as the encoder sorts them (by their UTF-8 bytes).
    /// Every running plugin's timings have the same keys: the order sorted for one is tried on the
    /// next before sorting again (sorting each plugin's ~15 keys, and escaping them, were a third of
    /// a 1,000-plugin answer).
    mutating func counts(_ name: StaticString, _ values: [String: Int]) {
        key(name)
        beginObject()
        if !values.isEmpty && !(values.count == lastOrder.count && writeCounts(values)) {
            lastOrder = values.keys.sorted(by: Self.precedes).map { key in
                var member: [UInt8] = [UInt8(ascii: "\"")]
                JSONEscaping.append(key, to: &member)
                member += Array("\":".utf8)
                return (key, member)
            }
            _ = writeCounts(values)
        }
        endObject()
    }

    /// The keys of the last dictionary of counts that needed sorting, in order, each with its
    /// member's start as written (`"key":`).
    private var lastOrder: [(key: String, member: [UInt8])] = []

    /// Writes `values` in `lastOrder`, or nothing (false) if `lastOrder` lacks one of them.
    private mutating func writeCounts(_ values: [String: Int]) -> Bool {
        let start = bytes.count
        for (key, member) in lastOrder {
            guard let value = values[key] else {
                bytes.removeSubrange(start...)
                afterValue = false
                return false
            }
            if afterValue { raw(",") }
            bytes += member
            bytes.append(contentsOf: String(value).utf8)
            afterValue = true
        }
        return true
    }

    /// Whether `a`'s UTF-8 bytes sort before `b`'s: what `a.utf8.lexicographicallyPrecedes(b.utf8)`
    /// says, over the strings' contiguous bytes (the generic form was the largest share of a
    /// `status` of 1,000 plugins, whose timings each have ~15 keys).
    package static func precedes(_ a: String, _ b: String) -> Bool {
        var a = a, b = b
        return a.withUTF8 { x in
            b.withUTF8 { y in
                for i in 0..<min(x.count, y.count) where x[i] != y[i] { return x[i] < y[i] }
                return x.count < y.count
            }
        }
    }

    private mutating func string(_ s: String) {
        if afterValue { raw(",") }
        bytes.append(UInt8(ascii: "\""))
        JSONEscaping.append(s, to: &bytes)
        bytes.append(UInt8(ascii: "\""))
        afterValue = true
    }

    private mutating func open(_ bracket: StaticString) {
        if afterValue { raw(",") }
        raw(bracket)
        afterValue = false
    }

    private mutating func close(_ bracket: StaticString) {
        raw(bracket)
        afterValue = true
    }

    private mutating func raw(_ s: StaticString) {
        bytes.append(contentsOf: UnsafeRawBufferPointer(start: s.utf8Start, count: s.utf8CodeUnitCount))
    }
}
