#if canImport(Glibc)
import Glibc
#endif

/// A thread's reusable buffer for the frames it builds and sends (`PluginRuntime.replyWriting`, a
/// reply; `request`, a call): the worker copies a frame when it is sent, so the next frame built
/// on this thread can reuse the same storage, and neither costs an allocation for its frame.
/// Touched only by its own thread (a thread-specific value): taken and given back with no
/// suspension between.
final class ScratchFrame {
    private var bytes: [UInt8] = []

    /// Frames larger than this are not kept (a thread that once answered 1 MiB keeps no 1 MiB).
    static let keptCapacity = 16 * 1024

    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key) { raw in
            if let raw { Unmanaged<ScratchFrame>.fromOpaque(raw).release() }
        }
        return key
    }()

    /// The calling thread's buffer holder, made the first time the thread asks.
    static var current: ScratchFrame {
        if let raw = pthread_getspecific(key) { return Unmanaged<ScratchFrame>.fromOpaque(raw).takeUnretainedValue() }
        let made = ScratchFrame()
        pthread_setspecific(key, Unmanaged.passRetained(made).toOpaque())
        return made
    }

    /// The buffer, empty, with the capacity it had; the holder keeps nothing until `give`. A
    /// nested use before `give` gets a new array.
    func take() -> [UInt8] {
        var out: [UInt8] = []
        swap(&out, &bytes)
        out.removeAll(keepingCapacity: true)
        return out
    }

    /// Hands a buffer back for the next frame.
    func give(_ frame: inout [UInt8]) {
        guard frame.capacity <= Self.keptCapacity else { return }
        swap(&frame, &bytes)
    }
}
