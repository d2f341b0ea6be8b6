#if canImport(Glibc)
import Glibc
#endif
import CLinuxSupport
import LinuxSupport
import PluginProtocol
import NIOPosix
import Dispatch

/// Clean-up that can wait on the disk or on the kernel's cgroup lock: an ended worker's control
/// group and its emptied temporary folder. It is done in order on one thread of its own, so that
/// the event loop never waits for it: a thousand workers ending together (a stop) would hold the
/// loop in `rmdir` for most of the supervisor's stop.
///
/// A temporary folder is first renamed, on the caller's thread, to `<home>/tmp/.ended-<n>` (a
/// rename frees the plugin's name at once: its next worker makes a new folder under it), and the
/// renamed tree is removed here. `finish` does what is left and waits: the supervisor calls it
/// before it returns, so nothing outlives it but what an upgrade's exec cut short, which the next
/// start sweeps (`sweepLeftovers`).
final class Janitor: Sendable {
    private let pool = NIOThreadPool(numberOfThreads: 1)
    private let folder: String
    private let serial = Guarded<UInt64>(0)

    /// `folder`: where ended workers' temporary folders wait for removal (`<home>/tmp`).
    init(folder: String) {
        self.folder = folder
        pool.start()
    }

    /// Removes `group` (its worker has been reaped).
    func remove(_ group: CgroupGroup) {
        pool.submit { _ in group.remove() }
    }

    /// Gives the allocator's free memory back to the system (`malloc_trim`), off the loop: after
    /// a client dropped with hundreds of MiB it had left unread, or large frames held for a worker
    /// went out (`Shared.trimMemoryWhenQuiet`).
    func trimMemory() {
        pool.submit { _ in cls_trim_memory() }
    }

    /// Empties and removes the folder at `path`: renamed out of the way now, removed later. Where
    /// it cannot be renamed (it does not exist, or lies elsewhere), it is removed here and now.
    /// `renamed: false` (the supervisor is shutting down: no worker will want the name again)
    /// leaves it where it is for the thread to remove: a rename costs the loop ~30 µs a worker on
    /// ext4, 30 ms of a stop of 1,000 plugins spent after the last worker has ended.
    func removeTree(_ path: String, renamed: Bool = true) {
        guard renamed else { return pool.submit { _ in FileSystem.removeTree(path) } }
        var st = stat()
        guard lstat(path, &st) == 0 else { return }
        let n = serial.withLock { n -> UInt64 in
            n &+= 1
            return n
        }
        let ended = folder + "/.ended-\(getpid())-\(n)"
        guard rename(path, ended) == 0 else { return FileSystem.removeTree(path) }
        pool.submit { _ in FileSystem.removeTree(ended) }
    }

    /// Ended folders an earlier supervisor with this home left behind (an upgrade's exec, a kill).
    func sweepLeftovers() {
        for name in (try? FileSystem.list(folder)) ?? [] where name.hasPrefix(".ended-") {
            let path = folder + "/" + name
            pool.submit { _ in FileSystem.removeTree(path) }
        }
    }

    /// Does what is queued, on the janitor's thread and in order, then ends the thread. Blocks:
    /// call it off the loop. A pool shut down with work queued hands that work to a Dispatch
    /// queue and returns before it has run, so that the supervisor's own clean-up of the cgroup
    /// tree would race it and an embedded host's program would go on with it still running; a
    /// last item is queued behind the rest and waited for first.
    func finish() {
        let drained = DispatchSemaphore(value: 0)
        pool.submit { _ in drained.signal() }
        drained.wait()
        try? pool.syncShutdownGracefully()
    }
}
