import NIOCore
import NIOEmbedded
import PluginProtocol
import Protocol
import Testing
@testable import SupervisorKit

/// The host events' fan-out (EventHub) and the host permission, without processes.
@Suite struct HostUnitTests {
    static func event(_ n: Int, plugin: String = "p") -> HostEvent {
        HostEvent(event: .restarting, plugin: plugin, time: "t", attempt: n)
    }

    @Test("a reader that falls behind loses what does not fit, counted, and hears `dropped` with the count once it has room; the hub never waits")
    func droppedEvents() async throws {
        let loop = EmbeddedEventLoop()
        let hub = EventHub(loop: loop, outbox: Outbox(loop: loop), door: LoopDoor())
        let stream = hub.listen(plugin: nil)
        let limit = EventHub.bufferLimit
        for n in 0..<(limit + 6) { hub.publish(Self.event(n)) }
        var reader = stream.makeAsyncIterator()
        for n in 0..<10 { #expect(await reader.next()?.attempt == n) }
        hub.publish(Self.event(9_999))
        // The rest of what fitted, then the notice, then the new event.
        for n in 10..<limit { #expect(await reader.next()?.attempt == n) }
        let notice = await reader.next()
        #expect(notice?.event == .dropped && notice?.count == 6 && notice?.plugin == nil)
        #expect(await reader.next()?.attempt == 9_999)
        hub.finishAll()
        #expect(await reader.next() == nil)
        // A listener after the end gets an ended stream at once.
        var late = hub.listen(plugin: nil).makeAsyncIterator()
        #expect(await late.next() == nil)
    }

    @Test("a reader of one plugin hears only that plugin's events")
    func filtered() async throws {
        let loop = EmbeddedEventLoop()
        let hub = EventHub(loop: loop, outbox: Outbox(loop: loop), door: LoopDoor())
        var only = hub.listen(plugin: "b").makeAsyncIterator()
        hub.publish(Self.event(1, plugin: "a"))
        hub.publish(Self.event(2, plugin: "b"))
        hub.publish(Self.event(3, plugin: "a"))
        hub.finishAll()
        #expect(await only.next()?.attempt == 2)
        #expect(await only.next() == nil)
    }

    @Test("a control client that does not read its events misses them (the hub never waits for its socket), counted; it hears `dropped` with the count once its socket takes frames again")
    func aClientThatDoesNotReadMissesEvents() throws {
        let loop = EmbeddedEventLoop()
        let channel = EmbeddedChannel(loop: loop)
        let hub = EventHub(loop: loop, outbox: Outbox(loop: loop), door: LoopDoor())
        let connection = ControlConnection(channel: channel)
        hub.follow(connection, id: 7, plugin: nil)
        #expect(hub.listenerCount == 1 && connection.listens)
        hub.publish(Self.event(1))
        loop.run()
        channel.isWritable = false
        for n in 2...4 { hub.publish(Self.event(n)) }
        loop.run()
        #expect(hub.droppedTotal == 3)
        channel.isWritable = true
        hub.publish(Self.event(5))
        loop.run()
        var frames: [String] = []
        while var buffer = try channel.readOutbound(as: ByteBuffer.self) {
            buffer.moveReaderIndex(forwardBy: Frame.headerSize)
            frames.append(buffer.readString(length: buffer.readableBytes) ?? "")
        }
        #expect(frames.count == 3)
        #expect(frames[0].hasPrefix(#"{"type":"hostEvent","id":7,"attempt":1,"#))
        #expect(frames[1].contains(#""count":3"#) && frames[1].contains(#""event":"dropped""#))
        #expect(frames[2].contains(#""attempt":5"#))
        hub.unfollow(connection)
        #expect(hub.listenerCount == 0 && !connection.listens)
        _ = try channel.finish()
    }

    @Test("host.call permissions: by name or *, parsed from the manifest's text and written back the same")
    func hostCallPermission() {
        let named = Permission("host.call:lookup")
        #expect(named == .hostCall("lookup") && named?.description == "host.call:lookup")
        #expect(Permission("host.call:") == nil && Permission("host.call:a b") == nil)
        #expect(Permission.allowsHostCall("lookup", in: [.network, .hostCall("lookup")]))
        #expect(!Permission.allowsHostCall("other", in: [.hostCall("lookup")]))
        #expect(Permission.allowsHostCall("other", in: [.hostCall("*")]))
        #expect(!Permission.allowsHostCall("lookup", in: [.network, .read("/tmp")]))
    }
}
