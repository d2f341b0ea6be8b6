import NIOCore

extension Shared {
    /// Large frames have just gone out (a worker's socket took what waited for it): once a second
    /// passes without more, the allocator gives its free memory back to the system (off the
    /// loop). glibc keeps freed blocks of a few MiB in its heaps once its mmap threshold has risen:
    /// without the trim, 256 MiB held for one stuck plugin leaves the supervisor at 250 MB, idle.
    /// (A fixed mmap threshold would make every large frame a fresh mapping: a third fewer calls a
    /// second at 512 KiB and more.)
    func trimMemoryWhenQuiet() {
        trimWhenQuiet?.cancel()
        trimWhenQuiet = loop.assumeIsolated().scheduleTask(in: .seconds(1)) { [janitor] in janitor.trimMemory() }
    }
}
