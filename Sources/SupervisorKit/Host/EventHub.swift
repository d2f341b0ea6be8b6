import NIOCore
import PluginProtocol
import Protocol

/// The host events (SPEC §12): what happened to plugins, told to every program that listens
/// (`PluginHost.events()`, a client's `events` request). Confined to the supervisor's event loop.
///
/// A listener that does not keep up loses events, never the supervisor's time: each has a bounded
/// buffer (`bufferLimit`); what does not fit is counted, and the listener hears `dropped` with the
/// count as soon as there is room again.
final class EventHub {
    private let loop: EventLoop
    private var listeners: [UInt64: Listener] = [:]
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

    init(loop: EventLoop) {
        self.loop = loop
    }

    /// Whether anyone listens: events are not even made otherwise.
    var isHeard: Bool { !listeners.isEmpty }

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
        let hub = NIOLoopBound(self, eventLoop: loop)
        continuation.onTermination = { [loop] _ in
            loop.execute { hub.value.listeners[id] = nil }
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
            if case .dropped = listener.continuation.yield(event) { listener.missed += 1 }
        }
    }

    // MARK: The events, made where they happen

    func started(_ record: PluginRecord, pid: Int32) {
        guard isHeard else { return }
        publish(HostEvent(event: .started, plugin: record.identifier, time: Self.now(), version: record.manifest.version.description, pid: pid))
    }

    func exited(_ record: PluginRecord, pid: Int32, _ status: ExitStatus) {
        guard isHeard else { return }
        publish(HostEvent(event: .exited, plugin: record.identifier, time: Self.now(), pid: pid, lastExit: status))
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
