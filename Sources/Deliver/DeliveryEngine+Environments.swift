import Common
import Queue

/// Sandbox and production tokens on one relay (SPEC §4): a push refused with `BadDeviceToken` goes once to the other
/// APNs environment; when that one accepts, the device's environment is remembered and used from then on.
extension DeliveryEngine {
    /// Where an attempt goes: where it was sent to be resent, else the device's known environment, else the
    /// configured one (also when the device's is the other one but no other environment is configured any more).
    func route(_ attempt: Resend) -> Settings.APNsEnvironment {
        let wanted = attempt.environment ?? attempt.job.environment ?? configuration.environment
        return wanted == configuration.environment || other?.environment == wanted ? wanted : configuration.environment
    }

    func pool(for environment: Settings.APNsEnvironment) -> APNsConnectionPool {
        guard environment != configuration.environment, let other else { return pool }
        return other.pool()
    }

    /// `BadDeviceToken` from one environment, the first time for this push and with another environment to try:
    /// resend it there at once (no attempt spent). `DeviceTokenNotForTopic` is a topic mismatch, never switched.
    func switchEnvironment(after verdict: Verdict, flight: InFlight) -> Bool {
        guard case .deadLetter(reason: "BadDeviceToken") = verdict, !flight.switched, let other else { return false }
        let target = flight.environment == configuration.environment ? other.environment : configuration.environment
        metrics.increment("kumapush_apns_environment_switches_total", [("to", target.rawValue)])
        loopState.resendQueue.append(Resend(job: flight.job, resends: flight.resends, environment: target, switched: true))
        return true
    }

    /// An environment other than the one the device was sent to by default accepted its push: remember it.
    func learnEnvironment(from verdict: Verdict, flight: InFlight) {
        guard case .delivered = verdict, flight.environment != (flight.job.environment ?? configuration.environment) else { return }
        do {
            try store.setEnvironment(deviceID: flight.job.deviceID, token: flight.job.deviceToken, environment: flight.environment)
            metrics.increment("kumapush_apns_environment_learned_total", [("environment", flight.environment.rawValue)])
            logger.info(
                "device token belongs to the other APNs environment: remembered",
                [
                    "device.token": Redact.token(flight.job.deviceToken), "apns.environment": flight.environment.rawValue
                ])
        } catch {
            // Not fatal: the next push goes the long way round again and tries once more.
            logger.warning("cannot remember a device's APNs environment", ["error": error.description])
        }
    }
}
