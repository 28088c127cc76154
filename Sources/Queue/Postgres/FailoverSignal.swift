import Synchronization

/// Shared by the connections of one `PostgresStore`. When one of them finds its server turned read-only (a write
/// refused with SQLSTATE 25006: a failover fenced the old primary and left it running), it raises the signal, and
/// every other connection of the store — reads, the second writer, the deliverer's LISTEN — replaces its own at its
/// next use. They never meet that error themselves (a read-only server answers reads), and left alone they would
/// keep reading frozen data and hear no NOTIFY.
final class FailoverSignal: Sendable {
    private let raised = Atomic<Int>(0)

    /// How many times it was raised; a connection opened when it was lower is to be replaced.
    var count: Int { raised.load(ordering: .relaxed) }

    func raise() { raised.add(1, ordering: .relaxed) }
}
