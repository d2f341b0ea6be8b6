import LinuxSupport
import NIOCore
import PluginProtocol

/// The one way into the supervisor's event loop from another thread (the child watcher, the
/// signal relay, the install queue, a host program's tasks): values bound to the loop, handed
/// back to it with `execute`. The door closes, under its lock, before the loop shuts down, so a
/// hand-in that comes after (a child reaped, a signal, a listener's end at that moment) is dropped
/// rather than scheduled on a loop that has ended: nothing on the loop could act on it by then.
final class LoopDoor: Sendable {
    private let open = Guarded(true)

    /// Runs `body` on `loop` unless the door has closed.
    func execute(on loop: EventLoop, _ body: @escaping @Sendable () -> Void) {
        open.withLock { isOpen in
            if isOpen { loop.execute(body) }
        }
    }

    /// From now on nothing is handed in; called before the loop's group shuts down.
    func close() {
        open.withLock { $0 = false }
    }
}

/// `value`, which belongs to the event loop, ready to travel to another thread and back: only the
/// loop can open it (`NIOLoopBound`), and other threads reach the loop through its door.
struct Handed<Value>: Sendable {
    private let bound: NIOLoopBound<Value>
    private let door: LoopDoor

    init(_ value: Value, eventLoop: EventLoop, door: LoopDoor) {
        bound = NIOLoopBound(value, eventLoop: eventLoop)
        self.door = door
    }

    var eventLoop: EventLoop { bound.eventLoop }
    /// The value itself: on the loop only (checked).
    var value: Value { bound.value }

    /// Runs `body` on the value's loop, from any thread (dropped once the loop is closing).
    func execute(_ body: @escaping @Sendable (Value) -> Void) {
        door.execute(on: bound.eventLoop) { [bound] in body(bound.value) }
    }
}
