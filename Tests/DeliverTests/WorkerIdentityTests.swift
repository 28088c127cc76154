import Deliver
import Testing

/// SPEC §4: a deliverer restarted on the same machine takes back only the leases of processes of this machine that
/// are gone; never another machine's, another pid namespace's, its own, or an id it cannot read.
@Suite struct WorkerIdentityTests {
    let me = WorkerIdentity(node: "abc123def456", pid: 4242)
    let alive: Set<Int32> = [4242, 77]

    func gone(_ worker: String) -> Bool { me.isGonePredecessor(worker) { alive.contains($0) } }

    @Test func aProcessOfThisNodeThatIsGoneIsAPredecessor() {
        #expect(gone("relay-1:31337:xY-_@abc123def456"))
    }

    @Test func livingProcessesOtherNodesItselfAndOtherFormatsAreNot() {
        #expect(!gone("relay-1:77:xY-_@abc123def456"), "alive")
        #expect(!gone("relay-1:31337:xY-_@fff000fff000"), "another machine or pid namespace")
        #expect(!gone("relay-1:4242:xY-_@abc123def456"), "this process")
        #expect(!gone("relay-1-31337-xY"), "a worker id from before v0.2 (no node)")
        #expect(!gone("relay-1:notapid:xY@abc123def456"))
        #expect(!gone(":0:x@abc123def456"))
    }

    @Test func anIDThisProcessMakesNamesItsNodeAndPid() {
        let id = WorkerIdentity.current.workerID(host: "relay-1")
        #expect(id.hasPrefix("relay-1:\(WorkerIdentity.current.pid):"))
        #expect(id.hasSuffix("@\(WorkerIdentity.current.node)"))
        #expect(!WorkerIdentity.current.isGonePredecessor(id), "never its own")
    }
}
