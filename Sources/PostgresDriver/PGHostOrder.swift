internal import CLibPQ

/// One server of a conninfo's host list, as libpq reports the one a connection reached (`PQhost`, `PQport`).
package struct PGServer: Equatable, Sendable {
    package let host: String
    package let port: String

    package init(host: String, port: String) {
        self.host = host
        self.port = port
    }
}

/// The servers a conninfo lists (`postgresql://…@db1:5432,db2:5432/…`, or `host=db1,db2 port=…`), so that a
/// reconnect can try the one that just failed last. libpq 15 always tries the hosts in the order written: after the
/// first host vanished silently, every reconnect would spend its whole `connect_timeout` on that dead host before
/// reaching the new primary. (libpq 16's `load_balance_hosts` shuffles instead, which still picks the dead one half
/// the time.)
package struct PGHostOrder: Sendable {
    private struct Entry {
        let host: String
        let hostaddr: String
        let port: String
    }
    private let entries: [Entry]
    /// The keywords the conninfo gave, the only ones written back (an empty `host` would mean the Unix socket).
    private let given: Set<String>

    /// Nil when the conninfo does not parse or names fewer than two servers: there is nothing to reorder.
    package init?(conninfo: String) {
        guard let options = PQconninfoParse(conninfo, nil) else { return nil }
        defer { PQconninfoFree(options) }
        var values: [String: String] = [:]
        var option = options
        while let keyword = option.pointee.keyword {
            if let value = option.pointee.val { values[String(cString: keyword)] = String(cString: value) }
            option += 1
        }
        func list(_ keyword: String) -> [String] {
            (values[keyword] ?? "").split(separator: ",", omittingEmptySubsequences: false).map(String.init)
        }
        let hosts = list("host")
        let hostaddrs = list("hostaddr")
        let ports = list("port")
        let count = max(hosts.count, hostaddrs.count)
        guard count >= 2 else { return nil }
        // libpq's rules: a list of one port applies to every host; otherwise each list has one entry per host.
        func entry(_ values: [String], _ index: Int) -> String {
            values.count == 1 ? values[0] : (index < values.count ? values[index] : "")
        }
        entries = (0..<count).map { Entry(host: entry(hosts, $0), hostaddr: entry(hostaddrs, $0), port: entry(ports, $0)) }
        given = Set(["host", "hostaddr", "port"].filter { !(values[$0] ?? "").isEmpty })
    }

    /// libpq parameters that list the same servers with `failed` moved to the end, the others in their order; empty
    /// when `failed` is not one of them. Given after the conninfo, they replace its host list (the last value of a
    /// keyword wins), and leave everything else the operator wrote.
    package func parameters(tryingLast failed: PGServer) -> [(String, String)] {
        // PQhost is the host name when one was given, else the address; an empty port entry is libpq's default.
        guard
            let index = entries.firstIndex(where: {
                ($0.host == failed.host || $0.host.isEmpty && $0.hostaddr == failed.host)
                    && ($0.port == failed.port || $0.port.isEmpty)
            })
        else { return [] }
        var reordered = entries
        reordered.append(reordered.remove(at: index))
        let lists: [(String, KeyPath<Entry, String>)] = [("host", \.host), ("hostaddr", \.hostaddr), ("port", \.port)]
        return lists.filter { given.contains($0.0) }.map { keyword, field in
            (keyword, reordered.map { $0[keyPath: field] }.joined(separator: ","))
        }
    }
}
