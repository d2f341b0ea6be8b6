import CLinuxSupport

/// Serialises the writers of one socket so frames never interleave, including the worker's SIGSYS
/// reporter, which writes from a signal handler where no ordinary mutex may be taken (see
/// cls_send_lock in linux_support.h). The lock word lives at a stable address for the C side.
public final class SendLock: @unchecked Sendable {
    // @unchecked: the only state is the C lock word, accessed solely through atomic operations,
    // and the held frames beside it, touched only by whoever holds the lock.
    public let pointer: UnsafeMutablePointer<cls_send_lock>

    public init() {
        pointer = .allocate(capacity: 1)
        pointer.initialize(to: cls_send_lock(state: 0, owner: 0, held: nil, held_len: 0, held_capacity: 0))
    }

    @inline(__always)
    public func withLock<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
        cls_send_lock_acquire(pointer)
        defer { cls_send_lock_release(pointer) }
        return try body()
    }

    /// The lock word's address, for the SIGSYS reporter.
    public var opaque: UnsafeMutableRawPointer { UnsafeMutableRawPointer(pointer) }

    deinit {
        cls_send_lock_forget_at_exit(pointer)
        cls_send_lock_free_held(pointer)
        pointer.deallocate()
    }
}
