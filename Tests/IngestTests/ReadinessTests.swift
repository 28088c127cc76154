import Foundation
import Synchronization
import TestSupport
import Testing
import Threading

@testable import Ingest

/// `/livez`, `/readyz` and `/health` on ingest's port (SPEC §2.3).
@Suite struct ReadinessTests {
    /// Readiness is whether a webhook would be stored now, so a wedged deliverer in the same process (`serve`)
    /// leaves `/readyz` and `/health` at 200; `/livez` names the wedged loop (a restart helps).
    @Test func aWedgedDeliveryLoopFailsLivenessButNotReadiness() throws {
        let silence = Mutex<Duration>(.zero)
        let h = try IngestHarness(otherLoops: [MonitoredLoop(name: "delivery") { silence.withLock { $0 } }])
        #expect(try h.client.send("GET", "/livez").status == 200)
        silence.withLock { $0 = .seconds(3600) }
        let live = try h.client.send("GET", "/livez")
        #expect(live.status == 503 && live.text == "{\"error\":\"wedged: delivery\"}")
        #expect(try h.client.send("GET", "/readyz").text == "{\"status\":\"ok\"}")
        #expect(try h.client.send("GET", "/health").status == 200)
    }

    @Test func readinessIs503ShuttingDownOnceShutdownBegins() throws {
        let h = try IngestHarness()
        #expect(try h.client.send("GET", "/readyz").status == 200)
        // The flag `shutdown` sets first; the listener itself still accepts here, so the route can be asked.
        h.service.shuttingDown.store(true, ordering: .relaxed)
        let answer = try h.client.send("GET", "/readyz")
        #expect(answer.status == 503 && answer.text == "{\"error\":\"shutting down\"}")
        #expect(try h.client.send("GET", "/health").status == 503)
    }

    @Test func readinessIs503WhenTheDatabaseDoesNotAnswer() throws {
        let h = try IngestHarness(wrap: { UnreachableDatabase(inner: $0) })
        let answer = try h.client.send("GET", "/readyz")
        #expect(answer.status == 503 && answer.text == "{\"error\":\"database unavailable\"}")
        #expect(try h.client.send("GET", "/livez").status == 200, "liveness never waits on the database")
    }
}
