import Testing
import SupervisorCore

/// The order plugins stop in (Stopping/StopOrder.swift): dependents first.
@Suite struct StopOrderTests {
    /// The waves a stop goes in when every stop under way ends before the next one does.
    func waves(of graph: [String: [String]]) -> [[String]] {
        var order = StopOrder.Progress(graph)
        var all: [[String]] = []
        var current = order.begin()
        while !current.isEmpty {
            all.append(current)
            current = current.flatMap { order.stopped($0) }.sorted()
        }
        #expect(order.isDone)
        return all
    }

    @Test func dependentsStopBeforeWhatTheyNeed() {
        // c needs b, b needs a; d stands alone.
        let graph = ["a": [], "b": ["a"], "c": ["b"], "d": []]
        #expect(waves(of: graph) == [["c", "d"], ["b"], ["a"]])
    }

    @Test func aDiamondStopsItsTopFirstAndItsRootLast() {
        let graph = ["root": [], "left": ["root"], "right": ["root"], "top": ["left", "right"]]
        #expect(waves(of: graph) == [["top"], ["left", "right"], ["root"]])
    }

    @Test func aDependencyOutsideTheSetDoesNotHoldTheWave() {
        // Removing b alone: it needs a, which stays.
        #expect(waves(of: ["b": ["a"]]) == [["b"]])
    }

    @Test func aCycleStillStops() {
        let graph = ["x": ["y"], "y": ["x"]]
        #expect(waves(of: graph) == [["x", "y"]])
    }

    @Test func nothingLiveIsNoWave() {
        #expect(waves(of: [:]).isEmpty)
    }

    @Test func everyPluginStopsOnceAndAfterEveryOneThatNeedsIt() {
        var graph: [String: [String]] = [:]
        for i in 0..<30 { graph["p\(i)"] = (0..<i).filter { ($0 * 7 + i) % 5 == 0 }.map { "p\($0)" } }
        let waves = waves(of: graph)
        let position = Dictionary(uniqueKeysWithValues: waves.enumerated().flatMap { index, wave in wave.map { ($0, index) } })
        #expect(position.count == graph.count)
        for (id, deps) in graph { for dep in deps { #expect(position[id]! < position[dep]!, "\(id) stops before \(dep)") } }
    }

    // MARK: A stop as it goes

    @Test func aPluginStopsOnceItsDependentsHaveNotWhenItsWaveHas() {
        // welcome needs greeter; asyncworks stands alone and is slow to stop.
        var order = StopOrder.Progress(["greeter": [], "welcome": ["greeter"], "asyncworks": []])
        #expect(order.begin() == ["asyncworks", "welcome"])
        #expect(order.stopped("welcome") == ["greeter"], "asyncworks still stopping holds nothing back")
        #expect(order.stopped("greeter").isEmpty && !order.isDone)
        #expect(order.stopped("asyncworks").isEmpty && order.isDone)
    }

    @Test func aDiamondsRootWaitsForBothSides() {
        var order = StopOrder.Progress(["root": [], "left": ["root"], "right": ["root"], "top": ["left", "right"]])
        #expect(order.begin() == ["top"])
        #expect(order.stopped("top") == ["left", "right"])
        #expect(order.stopped("left").isEmpty)
        #expect(order.stopped("right") == ["root"])
        #expect(order.stopped("root").isEmpty && order.isDone)
    }

    @Test func anEndThatIsNotUnderWayChangesNothing() {
        var order = StopOrder.Progress(["b": ["a"], "a": []])
        #expect(order.stopped("b").isEmpty, "not asked yet")
        #expect(order.begin() == ["b"])
        #expect(order.stopped("x").isEmpty && order.stopped("b") == ["a"] && order.stopped("b").isEmpty)
        #expect(StopOrder.Progress([:]).isDone)
        // A dependency outside the set holds nothing; a cycle stops all at once.
        var outside = StopOrder.Progress(["b": ["a"]])
        #expect(outside.begin() == ["b"])
        var cycle = StopOrder.Progress(["x": ["y"], "y": ["x"]])
        #expect(cycle.begin() == ["x", "y"])
    }

    @Test func inAnyOrderOfEndsEachStopsOnceAfterEveryOneThatNeedsIt() {
        var generator = SystemRandomNumberGenerator()
        for round in 0..<200 {
            var graph: [String: [String]] = [:]
            let count = Int.random(in: 1...25, using: &generator)
            for i in 0..<count { graph["p\(i)"] = (0..<i).filter { _ in Int.random(in: 0..<4, using: &generator) == 0 }.map { "p\($0)" } }
            var order = StopOrder.Progress(graph)
            var underWay = order.begin()
            var asked = Set(underWay), ended = Set<String>()
            while !underWay.isEmpty {
                let id = underWay.remove(at: Int.random(in: 0..<underWay.count, using: &generator))
                ended.insert(id)
                for next in order.stopped(id) {
                    #expect(!asked.contains(next), "round \(round): \(next) asked twice")
                    let dependents = graph.filter { $0.value.contains(next) }.keys
                    #expect(dependents.allSatisfy(ended.contains), "round \(round): \(next) asked before its dependents stopped")
                    asked.insert(next)
                    underWay.append(next)
                }
            }
            #expect(asked == Set(graph.keys) && order.isDone, "round \(round)")
        }
    }
}
