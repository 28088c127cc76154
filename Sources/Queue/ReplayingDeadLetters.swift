import Common

extension JobQueue {
    /// Replays the dead letters `filter` matches when it begins, `pageSize` at a time (one transaction each), calling
    /// `afterPage` after each; returns the totals. It stops at the last dead letter there was: what it requeues is
    /// stored under a new, larger id, and one a running deliverer dead-letters again before the next page must not be
    /// replayed a second time.
    public func replayAllDeadLetters(
        _ filter: DeadLetterFilter, pageSize: Int, now: () -> Int64, ttl: Duration, deviceCap: Int,
        afterPage: (ReplayBatch) -> Void = { _ in }
    ) throws(StoreError) -> ReplayBatch {
        var total = ReplayBatch(replayed: 0, leftAtCap: 0, lastExamined: nil)
        var filter = filter
        guard let last = try lastDeadLetterID(filter) else { return total }
        filter.through = last
        while true {
            let page = try replayDeadLetters(filter, limit: pageSize, now: now(), ttl: ttl, deviceCap: deviceCap)
            guard let examined = page.lastExamined else { break }
            filter.after = examined
            total.replayed += page.replayed
            total.leftAtCap += page.leftAtCap
            total.lastExamined = examined
            afterPage(page)
        }
        return total
    }
}
