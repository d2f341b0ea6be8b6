import Testing
import SupervisorCore

/// The order plugins stop in (Stopping/StopOrder.swift): dependents first, in waves.
@Suite struct StopOrderTests {
    @Test func dependentsStopBeforeWhatTheyNeed() {
        // c needs b, b needs a; d stands alone.
        let graph = ["a": [], "b": ["a"], "c": ["b"], "d": []]
        #expect(StopOrder.waves(of: graph) == [["c", "d"], ["b"], ["a"]])
    }

    @Test func aDiamondStopsItsTopFirstAndItsRootLast() {
        let graph = ["root": [], "left": ["root"], "right": ["root"], "top": ["left", "right"]]
        #expect(StopOrder.waves(of: graph) == [["top"], ["left", "right"], ["root"]])
    }

    @Test func aDependencyOutsideTheSetDoesNotHoldTheWave() {
        // Removing b alone: it needs a, which stays.
        #expect(StopOrder.wave(of: ["b": ["a"]]) == ["b"])
    }

    @Test func aCycleStillStops() {
        let graph = ["x": ["y"], "y": ["x"]]
        #expect(StopOrder.wave(of: graph) == ["x", "y"])
        #expect(StopOrder.waves(of: graph).count == 1)
    }

    @Test func nothingLiveIsNoWave() {
        #expect(StopOrder.wave(of: [:]).isEmpty && StopOrder.waves(of: [:]).isEmpty)
    }

    @Test func everyPluginStopsOnceAndAfterEveryOneThatNeedsIt() {
        var graph: [String: [String]] = [:]
        for i in 0..<30 { graph["p\(i)"] = (0..<i).filter { ($0 * 7 + i) % 5 == 0 }.map { "p\($0)" } }
        let waves = StopOrder.waves(of: graph)
        let position = Dictionary(uniqueKeysWithValues: waves.enumerated().flatMap { index, wave in wave.map { ($0, index) } })
        #expect(position.count == graph.count)
        for (id, deps) in graph { for dep in deps { #expect(position[id]! < position[dep]!, "\(id) stops before \(dep)") } }
    }
}
