import Synchronization

/// Random bytes for job ids, drawn from OpenSSL's CSPRNG a few kilobytes at a time.
///
/// One `RAND_bytes` call per webhook cost about 3 % of ingest's CPU (the generator's locking and bookkeeping per
/// call, not the bytes; measured with perf, docs/performance.md). The bytes handed out are the generator's own,
/// each used once; a reserve refilled under the lock never gives two callers the same bytes.
public enum RandomReserve {
    /// 256 job ids per refill: large enough to make the call rare, small enough that a refill is a short pause.
    public static let refillSize = 4096

    private struct Reserve {
        var bytes: [UInt8] = []
        var next = 0
    }

    private static let reserve = Mutex(Reserve())

    /// `count` (at most `refillSize`) unused random bytes.
    public static func bytes(_ count: Int) throws(Crypto.RandomnessUnavailable) -> [UInt8] {
        precondition(count <= refillSize, "ask Crypto.randomBytes for more than \(refillSize) bytes")
        return try reserve.withLock { (reserve: inout Reserve) throws(Crypto.RandomnessUnavailable) -> [UInt8] in
            if reserve.next + count > reserve.bytes.count {
                reserve.bytes = try Crypto.randomBytes(refillSize)
                reserve.next = 0
            }
            defer { reserve.next += count }
            return Array(reserve.bytes[reserve.next..<reserve.next + count])
        }
    }
}
