import NIOCore

extension Shared {
    /// Large frames have just gone out (a worker's socket took what waited for it): once a second
    /// passes without more, the allocator gives its free memory back to the system (off the
    /// loop). glibc keeps freed blocks of a few MiB in its heaps once its mmap threshold has risen,
    /// and a supervisor that held 256 MiB for one stuck plugin stayed at 250 MB, idle, for good;
    /// a fixed threshold instead made every large frame a fresh mapping (a third fewer calls a
    /// second of 512 KiB and more).
    func trimMemoryWhenQuiet() {
        trimWhenQuiet?.cancel()
        trimWhenQuiet = loop.assumeIsolated().scheduleTask(in: .seconds(1)) { [janitor] in janitor.trimMemory() }
    }
}
