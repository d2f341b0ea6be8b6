import NIOCore
import PluginProtocol

/// NIO decoder for the protocol's frames: yields each body as a ByteBuffer slice. An empty frame or
/// one over the limit is a protocol violation, refused at its header before its body is buffered.
struct FrameCodec: ByteToMessageDecoder {
    typealias InboundOut = ByteBuffer
    let maxBody: Int

    func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let header = buffer.getInteger(at: buffer.readerIndex, as: UInt32.self) else { return .needMoreData }
        let length = Int(header)
        if length == 0 { throw Frame.HeaderError.empty }
        if length > maxBody { throw Frame.HeaderError.tooLarge(length: length, limit: maxBody) }
        guard buffer.readableBytes >= Frame.headerSize + length else { return .needMoreData }
        buffer.moveReaderIndex(forwardBy: Frame.headerSize)
        let body = buffer.readSlice(length: length)!
        context.fireChannelRead(wrapInboundOut(body))
        return .continue
    }

    func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws -> DecodingState {
        while try decode(context: context, buffer: &buffer) == .continue {}
        return .needMoreData
    }
}
