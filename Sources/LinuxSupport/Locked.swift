#if canImport(Glibc)
import Glibc
#endif

/// A value behind a pthread mutex. Used where a lock is shared with another thread rather than
/// Synchronization's `Mutex`, whose contended path (a PI futex in an uninstrumented library) the
/// thread sanitizer cannot see, so the TSan run would report the guarded state as raced.
public final class Locked<Value>: @unchecked Sendable {
    // @unchecked: `value` is only touched with `mutex` held.
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private var value: Value

    public init(_ value: Value) {
        self.value = value
        pthread_mutex_init(mutex, nil)
    }

    public func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }
}
