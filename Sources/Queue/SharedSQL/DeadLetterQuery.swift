extension DeadLetterFilter {
    /// The filter as one `WHERE` clause on `jobs` and its values, in order, for either store: placeholders numbered
    /// from `$1` (`QueryConnection`), so a statement's own parameters follow as `$\(values.count + 1)`.
    func conditions<Value: BoundValue>() -> (String, [Value]) {
        var terms = ["state = 'discarded'"]
        var values: [Value] = []
        func add(_ test: String, _ value: Value, _ type: String) {
            values.append(value)
            terms.append("\(test) $\(values.count)::\(type)")
        }
        if let reason { add("last_error =", .text(reason), "text") }
        if let deviceID { add("device_id =", .text(deviceID), "text") }
        if let since { add("finalized_at >=", .integer(since), "bigint") }
        if let after { add("id >", .integer(after), "bigint") }
        if let through { add("id <=", .integer(through), "bigint") }
        return (terms.joined(separator: " AND "), values)
    }
}

extension DeadLetter {
    /// The columns `init(row:)` reads, in its order.
    static let columns = "id, public_id, device_id, last_error, attempt, created_at, finalized_at"

    init(row: some ResultRow) {
        self.init(
            id: row.int64(0), publicID: row.text(1), deviceID: row.text(2), reason: row.text(3), attempts: Int(row.int64(4)),
            acceptedAt: row.int64(5), deadAt: row.int64(6))
    }
}
