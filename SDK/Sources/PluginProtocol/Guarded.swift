#if canImport(Glibc)
import Glibc
#endif

/// A value behind a pthread mutex, for state that several threads share: the SDK's runtime (the
/// worker's delivering threads, the global executor's, timers'), a stream's two ends, and every
/// lock of the supervisor, the worker and the client libraries. Not Synchronization's `Mutex`: its
/// contended path (a futex in an uninstrumented library) is invisible to the thread sanitizer,
/// which then reports the guarded state as raced when the code is tested under it
/// (`InlineMethodTests`, scripts/test-tsan.sh).
public final class Guarded<Value>: @unchecked Sendable {
    // @unchecked: `value` is only touched with `mutex` held.
    @usableFromInline let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    @usableFromInline var value: Value

    public init(_ value: Value) {
        self.value = value
        // Adaptive: a waiter spins briefly before it sleeps, since the lock is held for a few
        // instructions (a table lookup), where a sleep and a wake-up cost microseconds.
        var attributes = pthread_mutexattr_t()
        pthread_mutexattr_init(&attributes)
        pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_ADAPTIVE_NP))
        pthread_mutex_init(mutex, &attributes)
        pthread_mutexattr_destroy(&attributes)
    }

    /// Inlinable, so a caller in another module gets it specialised to its `Value` (no generic
    /// metadata looked up at run time on every call).
    @inlinable
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
