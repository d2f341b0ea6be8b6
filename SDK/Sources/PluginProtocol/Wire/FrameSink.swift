/// Where a frame is written: a byte array (the worker, the CLI) or, in the supervisor, the very
/// NIO buffer that is sent, so a routed frame is built once and never copied.
public protocol FrameSink {
    /// Bytes written so far.
    var writtenCount: Int { get }
    mutating func append(byte: UInt8)
    mutating func append(bytes: UnsafeRawBufferPointer)
    /// Overwrites 4 bytes at `offset` (the length prefix, once the body is complete).
    mutating func setLengthPrefix(_ length: UInt32, at offset: Int)
}

extension Array: FrameSink where Element == UInt8 {
    @inlinable public var writtenCount: Int { count }
    @inlinable public mutating func append(byte: UInt8) { append(byte) }
    @inlinable public mutating func append(bytes: UnsafeRawBufferPointer) { append(contentsOf: bytes) }
    @inlinable public mutating func setLengthPrefix(_ length: UInt32, at offset: Int) {
        // One write of four bytes (each subscript would check the storage is unique again).
        withUnsafeMutableBytes { $0.storeBytes(of: length.bigEndian, toByteOffset: offset, as: UInt32.self) }
    }
}
