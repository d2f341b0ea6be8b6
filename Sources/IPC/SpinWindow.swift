import Synchronization

/// How long a reader polls its socket before it sleeps in `read`, adapted to how long its waits turn
/// out to be (the rule of the kernel's guest halt-polling, for one socket).
///
/// A sleeping reader is woken by the kernel on whatever CPU is free; on a virtual machine an idle
/// CPU has halted, and waking it costs tens of microseconds (here a socketpair ping-pong takes
/// ~60 µs a round trip between CPUs and ~4 µs on one). A reader that polls for a moment after its
/// last message sees the next one at once when it comes within that moment, as the next call
/// usually does while a client is calling. The window follows the waits: a wait that ended within
/// `maxNanoseconds` (after polling or after sleeping) makes the next poll longer, up to the maximum;
/// one that outlasted it halves the window, and below `floor` there is no polling until a short
/// wait is seen again. So a reader whose messages are far apart stops polling after a few of them,
/// and one that is idle spends at most about twice the maximum before it sleeps for good.
public struct SpinWindow: Sendable, Equatable {
    /// The longest poll; 0: never poll.
    public let maxNanoseconds: Int
    /// The next poll's length (0: sleep at once).
    public private(set) var currentNanoseconds: Int
    /// Shorter windows are not worth a poll: the window drops to 0, and grows back from here.
    public static let floor = 5_000

    public init(maxNanoseconds: Int) {
        self.maxNanoseconds = max(0, maxNanoseconds)
        currentNanoseconds = self.maxNanoseconds
    }

    /// The reader slept and was woken `waited` ns after its wait began (its poll included). A
    /// message caught while polling changes nothing.
    public mutating func slept(waited: Int) {
        guard maxNanoseconds > 0 else { return }
        if waited <= maxNanoseconds {
            currentNanoseconds = min(maxNanoseconds, max(currentNanoseconds * 2, Self.floor))
        } else {
            currentNanoseconds /= 2
            if currentNanoseconds < Self.floor { currentNanoseconds = 0 }
        }
    }
}

/// Which thread of this process may poll a socket now: at most one at a time (a program's direct
/// link's thread, a worker's I/O thread with `workerSpinMicroseconds`), so a program reading many
/// sockets keeps at most one CPU busy polling, as Go's runtime limits its spinning threads. A
/// thread that does not get the turn sleeps at once.
public enum PollingTurn {
    private static let taken = Atomic<Bool>(false)

    /// Takes the turn; false while another thread has it.
    public static func take() -> Bool {
        taken.compareExchange(expected: false, desired: true, ordering: .acquiring).exchanged
    }

    /// Gives back the turn `take` gave.
    public static func give() {
        taken.store(false, ordering: .releasing)
    }
}
