import SupervisorCore
import Testing

/// The open-files limit a supervisor asks for its plugins, and what it says when it cannot have it.
@Suite struct DescriptorBudgetTests {
    @Test("the need grows by a worker's descriptors and one spare a plugin, and one a declared dependency, over a fixed reserve")
    func need() {
        #expect(DescriptorBudget(plugins: 0).needed == DescriptorBudget.reserve)
        #expect(DescriptorBudget(plugins: 1_000).needed == DescriptorBudget.reserve + 8 * 1_000)
        #expect(DescriptorBudget.perWorker == 7, "a worker's descriptors in the supervisor: 3 sockets, 2 pipes, a pidfd, a seccomp listener")
        // A peer link's mark witness, one for each declared dependency.
        #expect(DescriptorBudget(plugins: 1_000, peerLinks: 1_500).needed == DescriptorBudget.reserve + 8 * 1_000 + 1_500)
    }

    @Test("a limit that covers the need says nothing; a lower one says how many plugins fit, the limit, the need and what to raise")
    func shortfall() throws {
        let budget = DescriptorBudget(plugins: 1_000)
        #expect(budget.shortfall(limit: budget.needed, hard: budget.needed) == nil)
        #expect(budget.shortfall(limit: 1_000_000, hard: 1_000_000) == nil)
        let said = try #require(budget.shortfall(limit: 1_024, hard: 4_096))
        #expect(said.contains("about 141 of these 1000 plugins"))
        #expect(said.contains("(1024, hard limit 4096)"))
        #expect(said.contains("at least \(budget.needed)"))
        #expect(said.contains("LimitNOFILE="))
        // Every worker fits, the headroom does not: said so, never "32 of these 30".
        let few = DescriptorBudget(plugins: 30)
        let tight = try #require(few.shortfall(limit: 256, hard: 256))
        #expect(tight.contains("lets all 30 plugins run, with little room left") && tight.contains("at least \(few.needed)"), "\(tight)")
        // Below the reserve, what the supervisor holds of its own is all it keeps (ulimit -n 64: 4 fit;
        // 5 ran there), and never a negative count.
        #expect(DescriptorBudget.plugins(under: 64) == 4)
        #expect(DescriptorBudget.plugins(under: 20) == 0)
        // Never fewer for a higher limit.
        #expect((20..<5_000).allSatisfy { DescriptorBudget.plugins(under: $0 + 1) >= DescriptorBudget.plugins(under: $0) })
    }
}
