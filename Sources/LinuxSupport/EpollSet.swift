#if canImport(Glibc)
import Glibc
#endif
import CLinuxSupport

/// An epoll set that one thread waits on, which any thread can tell to stop (an eventfd in the set):
/// the watcher threads of the supervisor (children's pidfds, seccomp listeners), which a program
/// that embeds the supervisor must be able to end with it.
final class EpollSet: Sendable {
    let fd: Int32
    private let wakeFD: Int32

    init() throws(SystemError) {
        let fd = cls_epoll_create()
        if fd < 0 { throw SystemError(call: "epoll_create1", errno: -fd) }
        let wake = cls_wake_fd()
        if wake < 0 {
            _ = close(fd)
            throw SystemError(call: "eventfd", errno: -wake)
        }
        if cls_epoll_add(fd, wake) < 0 {
            let error = errno
            _ = close(fd)
            _ = close(wake)
            throw SystemError(call: "epoll_ctl(EPOLL_CTL_ADD)", errno: error, context: "eventfd")
        }
        self.fd = fd
        wakeFD = wake
    }

    func add(_ descriptor: Int32) -> Int32 { cls_epoll_add(fd, descriptor) }
    func remove(_ descriptor: Int32) { _ = cls_epoll_remove(fd, descriptor) }

    /// Waits for descriptors to be ready and returns how many are in `ready`; nil once `stop()` was
    /// called (then both descriptors are closed: the set is not used again).
    func wait(into ready: inout [Int32]) -> Int? {
        while true {
            let n = ready.withUnsafeMutableBufferPointer { cls_epoll_wait(fd, $0.baseAddress, Int32($0.count)) }
            guard n > 0 else { continue }
            if ready[0..<Int(n)].contains(wakeFD) {
                _ = close(fd)
                _ = close(wakeFD)
                return nil
            }
            return Int(n)
        }
    }

    /// Ends the waiting thread's loop (`wait` returns nil).
    func stop() {
        var one: UInt64 = 1
        _ = write(wakeFD, &one, 8)
    }
}
