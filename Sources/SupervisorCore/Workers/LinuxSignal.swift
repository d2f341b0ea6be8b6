/// The signals the core names: Linux's numbers (the same on x86_64 and arm64) and the names the
/// supervisor writes (`SIGSEGV`; `signal N` for one without a name), as LinuxSupport's
/// `LifecycleSignals.name` writes them (a unit test holds the two together).
package enum LinuxSignal {
    package static let ill: Int32 = 4
    package static let trap: Int32 = 5
    package static let bus: Int32 = 7
    package static let segv: Int32 = 11
    package static let sys: Int32 = 31

    private static let names: [Int32: String] = [
        1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL",
        10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2", 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM", 17: "SIGCHLD", 18: "SIGCONT",
        19: "SIGSTOP", 20: "SIGTSTP", 21: "SIGTTIN", 22: "SIGTTOU", 24: "SIGXCPU", 25: "SIGXFSZ", 31: "SIGSYS",
    ]

    /// "SIGSEGV" for 11; "signal N" for one without a name.
    package static func name(_ number: Int32) -> String { names[number] ?? "signal \(number)" }

    /// The number of a signal named as `name` spells it ("SIGSEGV"), or nil.
    package static func number(_ name: String) -> Int32? { names.first { $0.value == name }?.key }
}
