/// What `JobQueue.finishThenClaim` did: per outcome whether it applied (as `finish` returns), the claim's jobs or its
/// failure, and how long the finish took (the rest of the call is the claim's and the commit's: the stage metrics).
public struct FinishedThenClaimed: Sendable {
    public var applied: [Bool]
    public var claimed: Result<[ClaimedJob], StoreError>
    public var finishTime: Duration

    public init(applied: [Bool], claimed: Result<[ClaimedJob], StoreError>, finishTime: Duration) {
        self.applied = applied
        self.claimed = claimed
        self.finishTime = finishTime
    }
}

extension JobQueue {
    /// Two transactions, one after the other: for a store whose claim and completion cannot share one.
    public func finishThenClaim(_ outcomes: [JobOutcome], worker: String, now: Int64, claimLimit: Int, lease: Duration) throws(StoreError)
        -> FinishedThenClaimed
    {
        let started = ContinuousClock.now
        let applied = try finish(outcomes, worker: worker, now: now)
        let finishTime = ContinuousClock.now - started
        do {
            let claimed = try claim(worker: worker, limit: claimLimit, now: now, lease: lease)
            return FinishedThenClaimed(applied: applied, claimed: .success(claimed), finishTime: finishTime)
        } catch {
            return FinishedThenClaimed(applied: applied, claimed: .failure(error), finishTime: finishTime)
        }
    }
}
