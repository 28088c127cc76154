import Common
import Ingest

/// `SHUTDOWN_DELAY`: between SIGTERM and closing the listener, `/readyz` answers 503 while webhooks are still
/// accepted, so that a load balancer in front of a self-bound listener stops sending before it closes (Uptime Kuma
/// never retries a refused webhook). A second SIGTERM or SIGINT ends the wait early.
enum ShutdownDelay {
    static func keepAccepting(_ service: IngestService, for delay: Duration, logger: Logger) {
        service.announceShutdown()
        guard delay > .zero else { return }
        logger.info("still accepting while /readyz answers 503, for load balancers to stop sending", ["delay_ms": String(delay.wholeMilliseconds)])
        if let signal = TerminationSignals.wait(timeout: delay) {
            logger.info("shutdown delay cut short", ["signal": signal])
        }
    }
}
