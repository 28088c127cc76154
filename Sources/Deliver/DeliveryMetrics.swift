import Common

/// The delivery side's Prometheus metrics (SPEC §2.3).
enum DeliveryMetrics {
    /// The series every push updates, resolved once: by name, each update rendered its labels and hashed its series
    /// under the registry's lock (about 1,000 instructions each, four per push).
    struct PerPush: Sendable {
        let webhookToAPNs: MetricsRegistry.Histogram
        let apnsRequest: MetricsRegistry.Histogram
        let claimWait: MetricsRegistry.Histogram
        /// `kumapush_deliveries_total` of a push APNs accepted; other outcomes, rarer, are counted by name.
        let delivered: MetricsRegistry.Counter
        /// Every dead letter, whatever its reason: `kumapush_deliveries_total`'s series of a reason begins at its
        /// first dead letter, which `increase()` cannot see, so the dead-letter alert reads this one.
        let deadLettered: MetricsRegistry.Counter

        init(_ metrics: MetricsRegistry) {
            delivered = metrics.counter("kumapush_deliveries_total", [("outcome", "delivered"), ("reason", "")])
            deadLettered = metrics.counter("kumapush_dead_lettered_total")
            webhookToAPNs = metrics.histogram("kumapush_webhook_to_apns_seconds")
            apnsRequest = metrics.histogram("kumapush_apns_request_seconds")
            claimWait = metrics.histogram("kumapush_claim_wait_seconds")
        }
    }

    static func describe(_ metrics: MetricsRegistry, pool: APNsConnectionPool, tokens: ProviderTokenSource) {
        metrics.describe("kumapush_deliveries_total", .counter, "APNs answers by outcome and APNs reason.")
        metrics.describe("kumapush_devices_removed_total", .counter, "Devices removed because APNs reported their token gone.")
        metrics.describe(
            "kumapush_webhook_to_apns_seconds", .histogram, "From webhook accepted to its push's first APNs request.",
            buckets: latencyBuckets)
        metrics.describe("kumapush_dead_lettered_total", .counter, "Pushes dead-lettered, every reason.")
        metrics.describe("kumapush_apns_request_seconds", .histogram, "APNs request round trip.", buckets: latencyBuckets)
        // The stages of kumapush_webhook_to_apns_seconds on this side: how long a new job waited to be claimed (the
        // wake-up and the claim), and the store's own time per claim and per completion batch.
        metrics.describe(
            "kumapush_claim_wait_seconds", .histogram, "From webhook accepted to its job's first claim by a deliverer.",
            buckets: latencyBuckets)
        metrics.describe(
            "kumapush_delivery_store_seconds", .histogram, "Time the store takes for one claim or one completion batch.",
            buckets: latencyBuckets)
        metrics.describe("kumapush_apns_connections", .gauge, "Open HTTP/2 connections to APNs.")
        metrics.describe(
            "kumapush_delivery_batch_size", .histogram, "Push outcomes recorded per store transaction.",
            buckets: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000])
        metrics.describe("kumapush_provider_token_refreshes_total", .counter, "Provider tokens (JWT) made.")
        metrics.describe("kumapush_digests_total", .counter, "Digest pushes sent for alert storms.")
        metrics.describe("kumapush_alerts_merged_total", .counter, "Alerts carried by digest pushes.")
        metrics.describe(
            "kumapush_apns_environment_switches_total", .counter,
            "Pushes refused as BadDeviceToken resent once to the other APNs environment, by the environment tried.")
        metrics.describe(
            "kumapush_apns_environment_learned_total", .counter,
            "Devices whose token the other APNs environment accepted, remembered from then on.")
        metrics.describe("kumapush_dead_letters_purged_total", .counter, "Dead letters purged over DEAD_LETTER_MAX (oldest first).")
        metrics.describe(
            "kumapush_delivery_stalls_total", .counter,
            "Times the deliverer found due jobs, no known APNs failure and nothing sent for STALL_TIMEOUT, and reset itself.")
        // SPEC §4 names the stall counter so; the same count under the SPEC's name, for alerts written from it.
        metrics.describe(
            "relay_delivery_stalls_total", .counter, "The same as kumapush_delivery_stalls_total, under the name SPEC §4 gives it.")
        // Exported from the start at zero: a series that first appears at 1 is a rise `increase()` cannot see, and
        // the first stall of a process is usually its only one.
        for stalls in ["kumapush_delivery_stalls_total", "relay_delivery_stalls_total"] { _ = metrics.counter(stalls) }
        metrics.collect {
            [
                (name: "kumapush_apns_connections", labels: [], value: Double(pool.connectionCount)),
                (name: "kumapush_provider_token_refreshes_total", labels: [], value: Double(tokens.refreshes.load(ordering: .relaxed)))
            ]
        }
    }

    /// The deliverer's state as a dashboard and an alert rule read it (SPEC §2.3): the outage breaker and a
    /// configuration pause with APNs' reason, as the loop last published them (`publishReadiness`, once a second).
    static func describeState(_ metrics: MetricsRegistry, engine: DeliveryEngine) {
        metrics.describe(
            "kumapush_outage_breaker", .gauge,
            "1 for the outage breaker's state: closed (sending), open (APNs failing for everyone: probing), paused.")
        metrics.describe(
            "kumapush_delivery_paused", .gauge, "1 while a configuration fault (the reason, APNs') pauses delivery; 0 otherwise.")
        metrics.collect { [weak engine] in
            guard let engine else { return [] }
            let pause = engine.publishedPause.withLock { $0 }
            let state = pause != nil ? "paused" : engine.publishedOutage.load(ordering: .relaxed) ? "open" : "closed"
            var samples = ["closed", "open", "paused"].map {
                (name: "kumapush_outage_breaker", labels: [("state", $0)], value: $0 == state ? 1.0 : 0.0)
            }
            samples.append((name: "kumapush_delivery_paused", labels: [("reason", pause ?? "")], value: pause == nil ? 0 : 1))
            return samples
        }
    }
}
