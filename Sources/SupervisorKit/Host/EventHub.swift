import NIOCore
import PluginProtocol
import Protocol
import SupervisorCore

/// The host events (SPEC §12): what happened to plugins, told to every program that listens
/// (`PluginHost.events()`, a client's `events` request). Confined to the supervisor's event loop.
///
/// A listener that does not keep up loses events, never the supervisor's time: each has a bounded
/// buffer (`bufferLimit` events for the embedding program's streams; a control client's socket
/// buffer, up to the outbox's high water mark); what does not fit is counted, and the listener
/// hears `dropped` with the count as soon as there is room again.
final class EventHub {
    private let loop: EventLoop
    private let outbox: Outbox
    private let door: LoopDoor
    private var listeners: [UInt64: Listener] = [:]
    /// Control clients following events, by connection and their `events` request's id.
    private var followers: [ObjectIdentifier: [UInt64: Follower]] = [:]
    /// Events a reader missed, in all (the `supervisor_host_events_dropped_total` counter reads it).
    private(set) var droppedTotal = 0
    private var nextListener: UInt64 = 0
    /// The supervisor has stopped: a new listener's stream ends at once.
    private var closed = false

    /// Events held for a listener that has not read them yet.
    static let bufferLimit = 1_024

    private final class Listener {
        let continuation: AsyncStream<HostEvent>.Continuation
        /// Only this plugin's events (nil: every plugin's).
        let plugin: String?
        /// Events that did not fit since it last had room.
        var missed = 0

        init(_ continuation: AsyncStream<HostEvent>.Continuation, plugin: String?) {
            self.continuation = continuation
            self.plugin = plugin
        }
    }

    private final class Follower {
        let connection: ControlConnection
        let id: UInt64
        let plugin: String?
        var missed = 0

        init(_ connection: ControlConnection, id: UInt64, plugin: String?) {
            self.connection = connection
            self.id = id
            self.plugin = plugin
        }
    }

    init(loop: EventLoop, outbox: Outbox, door: LoopDoor) {
        self.loop = loop
        self.outbox = outbox
        self.door = door
    }

    /// Whether anyone listens: events are not even made otherwise.
    var isHeard: Bool { !listeners.isEmpty || !followers.isEmpty }
    /// How many listen: the embedding program's streams and control clients' `events` requests.
    var listenerCount: Int { listeners.count + followers.values.reduce(0) { $0 + $1.count } }

    /// A control client's `events` request (`id`): its events come as `hostEvent` frames with that
    /// id until it cancels it or goes away.
    func follow(_ connection: ControlConnection, id: UInt64, plugin: String?) {
        loop.preconditionInEventLoop()
        guard !closed, !connection.closed else { return }
        followers[ObjectIdentifier(connection), default: [:]][id] = Follower(connection, id: id, plugin: plugin)
        connection.following.insert(id)
    }

    /// A client's `events` requests being followed, with their plugin (an upgrade hands them over).
    func following(_ connection: ControlConnection) -> [(id: UInt64, plugin: String?)] {
        (followers[ObjectIdentifier(connection)] ?? [:]).map { ($0.key, $0.value.plugin) }.sorted { $0.id < $1.id }
    }

    /// Stops one `events` request of a client (its `cancel`), or all of them (it went away).
    func unfollow(_ connection: ControlConnection, id: UInt64? = nil) {
        let key = ObjectIdentifier(connection)
        if let id {
            followers[key]?[id] = nil
            connection.following.remove(id)
            if followers[key]?.isEmpty == true { followers[key] = nil }
        } else {
            followers[key] = nil
            connection.following = []
        }
    }

    /// A new listener's events, from the next one on. Ends when the listener stops reading (its
    /// stream is dropped or cancelled) or `finishAll` is called at shutdown.
    func listen(plugin: String?) -> AsyncStream<HostEvent> {
        loop.preconditionInEventLoop()
        let (stream, continuation) = AsyncStream.makeStream(of: HostEvent.self, bufferingPolicy: .bufferingOldest(Self.bufferLimit))
        if closed {
            continuation.finish()
            return stream
        }
        nextListener += 1
        let id = nextListener
        listeners[id] = Listener(continuation, plugin: plugin)
        // The hub is the loop's: the stream's end (on the reader's thread) hands it back there.
        let hub = Handed(self, eventLoop: loop, door: door)
        continuation.onTermination = { _ in
            hub.execute { $0.listeners[id] = nil }
        }
        return stream
    }

    /// Ends every listener's stream (the supervisor has stopped).
    func finishAll() {
        loop.preconditionInEventLoop()
        closed = true
        let all = listeners.values
        listeners = [:]
        for listener in all { listener.continuation.finish() }
        followers = [:]
    }

    func publish(_ event: HostEvent) {
        loop.preconditionInEventLoop()
        for listener in listeners.values {
            if let only = listener.plugin, only != event.plugin { continue }
            if listener.missed > 0 {
                let notice = HostEvent(event: .dropped, plugin: nil, time: event.time, count: listener.missed)
                guard case .enqueued = listener.continuation.yield(notice) else {
                    listener.missed += 1
                    continue
                }
                listener.missed = 0
            }
            if case .dropped = listener.continuation.yield(event) {
                listener.missed += 1
                droppedTotal += 1
            }
        }
        guard !followers.isEmpty else { return }
        // One encoding for every client (the members after `{`), spliced after `type` and `id`.
        guard let encoded = try? ProtocolJSON.encode(event), encoded.count > 2 else { return }
        for (key, byID) in followers {
            for follower in byID.values {
                let connection = follower.connection
                if connection.closed {
                    followers[key] = nil
                    break
                }
                if let only = follower.plugin, only != event.plugin { continue }
                // The supervisor never waits for a reader: a socket that is full misses events.
                guard connection.channel.isWritable else {
                    follower.missed += 1
                    droppedTotal += 1
                    continue
                }
                if follower.missed > 0 {
                    let notice = HostEvent(event: .dropped, plugin: nil, time: event.time, count: follower.missed)
                    if let bytes = try? ProtocolJSON.encode(notice) { write(bytes, to: follower) }
                    follower.missed = 0
                }
                write(encoded, to: follower)
            }
        }
    }

    /// `connection` takes writes again: its followers that missed events hear `dropped` now, not
    /// with the next event (which may not come for long).
    func roomAgain(for connection: ControlConnection) {
        loop.preconditionInEventLoop()
        guard let byID = followers[ObjectIdentifier(connection)] else { return }
        for follower in byID.values where follower.missed > 0 && connection.channel.isWritable {
            let notice = HostEvent(event: .dropped, plugin: nil, time: Self.now(), count: follower.missed)
            if let bytes = try? ProtocolJSON.encode(notice) { write(bytes, to: follower) }
            follower.missed = 0
        }
    }

    private func write(_ encoded: [UInt8], to follower: Follower) {
        let channel = follower.connection.channel
        var frame = outbox.encoder(.hostEvent, for: channel, capacity: encoded.count + 16)
        frame.uint("id", follower.id)
        // The event's own members, as they are: everything after its opening brace.
        encoded.withUnsafeBytes { frame.members(UnsafeRawBufferPointer(rebasing: $0[1..<($0.count - 1)])) }
        outbox.write(frame.finish(), to: channel)
    }

    // MARK: The events, made where they happen

    func started(_ record: PluginRecord, pid: Int32) {
        guard isHeard else { return }
        publish(HostEvent(event: .started, plugin: record.identifier, time: Self.now(), version: record.manifest.version.description, pid: pid))
    }

    func exited(_ record: PluginRecord, pid: Int32, _ status: ExitStatus, resent: Lifecycle.Resent) {
        guard isHeard else { return }
        publish(HostEvent(event: .exited, plugin: record.identifier, time: Self.now(), pid: pid, lastExit: status,
                          replayed: resent.replayed > 0 ? resent.replayed : nil, retried: resent.retried > 0 ? resent.retried : nil))
    }

    func activated(_ record: PluginRecord, by trigger: String) {
        guard isHeard else { return }
        publish(HostEvent(event: .activated, plugin: record.identifier, time: Self.now(), pid: record.instance?.pid, trigger: trigger))
    }

    func deactivated(_ record: PluginRecord, idleMs: Int?) {
        guard isHeard else { return }
        publish(HostEvent(event: .deactivated, plugin: record.identifier, time: Self.now(), idleMs: idleMs))
    }

    func restarting(_ record: PluginRecord, delayMs: Int) {
        guard isHeard else { return }
        publish(HostEvent(event: .restarting, plugin: record.identifier, time: Self.now(), attempt: record.restarts, delayMs: delayMs))
    }

    func failed(_ record: PluginRecord) {
        guard isHeard else { return }
        publish(HostEvent(event: .failed, plugin: record.identifier, time: Self.now(), lastError: record.problem ?? record.lastError))
    }

    func updated(_ record: PluginRecord, from: String, pid: Int32) {
        guard isHeard else { return }
        publish(HostEvent(event: .updated, plugin: record.identifier, time: Self.now(), pid: pid,
                          from: from, to: record.manifest.version.description))
    }

    func installed(_ identifier: String, version: String) {
        guard isHeard else { return }
        publish(HostEvent(event: .installed, plugin: identifier, time: Self.now(), version: version))
    }

    func uninstalled(_ identifier: String, version: String) {
        guard isHeard else { return }
        publish(HostEvent(event: .uninstalled, plugin: identifier, time: Self.now(), version: version))
    }

    static func now() -> String { JSONLogHandler.now() }
}
