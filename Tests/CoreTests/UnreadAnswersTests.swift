import Testing
import SupervisorCore

/// A worker that asks without reading its answers (Workers/UnreadAnswers.swift).
@Suite struct UnreadAnswersTests {
    @Test("requests while the socket has room are never counted, however many")
    func aReadingWorkerIsNeverEnded() {
        var unread = UnreadAnswers()
        for _ in 0..<(UnreadAnswers.requestsLimit * 2) { #expect(unread.request(full: false, waiting: { 0 }) == nil) }
        #expect(unread.requestsWhileFull == 0)
    }

    @Test("past the limit of requests while the socket stays full, the worker is ended with the figures")
    func tooManyRequestsWhileFull() {
        var unread = UnreadAnswers()
        for _ in 0..<UnreadAnswers.requestsLimit { #expect(unread.request(full: true, waiting: { 5 << 20 }) == nil) }
        let why = unread.request(full: true, waiting: { 5 << 20 })
        #expect(why == "it does not read its socket: 65537 requests made while 5 MiB of answers waited for it (65536 requests or 256 MiB at most)")
    }

    @Test("reading again (the socket has room) starts the count over")
    func readingResetsTheCount() {
        var unread = UnreadAnswers()
        for _ in 0..<UnreadAnswers.requestsLimit { _ = unread.request(full: true, waiting: { 0 }) }
        #expect(unread.request(full: false, waiting: { 0 }) == nil)
        #expect(unread.requestsWhileFull == 0)
        #expect(unread.request(full: true, waiting: { 0 }) == nil)
    }

    @Test("past the bytes waiting, one request is enough; the bytes are weighed only while the socket is full")
    func tooManyBytesWaiting() {
        var unread = UnreadAnswers()
        var asked = 0
        #expect(unread.request(full: false, waiting: { asked += 1; return Int.max }) == nil)
        #expect(asked == 0)
        #expect(unread.request(full: true, waiting: { UnreadAnswers.bytesLimit }) == nil)
        #expect(unread.request(full: true, waiting: { UnreadAnswers.bytesLimit + 1 })?.hasPrefix("it does not read its socket: 2 requests made while 256 MiB") == true)
    }
}
