import PropertyBased
import Testing

/// A model of the supervisor's driver over some of the core's values, for the randomised tests:
/// each step is a number that the world turns into an input (a call, a reply, a crash, time
/// passing...), and after every step its invariants hold. `RandomInputTests` and
/// `ReplayRandomTests` are two of them.
protocol SimulatedWorld {
    init()
    /// Applies the input that `step` stands for.
    mutating func apply(_ step: Int)
    /// Fails the test (with `#expect`) where an invariant does not hold.
    func checkInvariants()
    /// Ends everything that still runs, as a shutdown would.
    mutating func stopEverything()
    /// After `stopEverything`: every call was answered exactly once.
    func checkEveryCallAnsweredOnce()
}

extension SimulatedWorld {
    /// `count` random sequences of steps (each from `steps`, of a length in `length`), each applied
    /// to a new world with the invariants checked after every step, then at the end. A failing
    /// sequence is printed with its seed and shrunk.
    static func check(count: Int, steps: ClosedRange<Int>, length: ClosedRange<Int>) async {
        await propertyCheck(count: count, input: Gen.int(in: steps).array(of: length)) { sequence in
            var world = Self()
            for step in sequence {
                world.apply(step)
                world.checkInvariants()
            }
            world.stopEverything()
            world.checkInvariants()
            world.checkEveryCallAnsweredOnce()
        }
    }
}
