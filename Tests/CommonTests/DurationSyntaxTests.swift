import Common
import Testing

@Suite struct DurationSyntaxTests {
    @Test(
        arguments: [
            ("500ms", 500), ("1s", 1000), ("90s", 90_000), ("5m", 300_000), ("24h", 86_400_000),
            ("7d", 604_800_000), ("0", 0), (" 2m ", 120_000)
        ] as [(String, Int64)])
    func parsesEachUnit(text: String, millis: Int64) {
        #expect(DurationSyntax.parse(text)?.wholeMilliseconds == millis)
    }

    @Test(arguments: ["", "5", "1.5s", "-1s", "s", "10 s", "1w", "1S", "99999999999999999d"])
    func rejectsMalformedText(text: String) {
        #expect(DurationSyntax.parse(text) == nil)
    }

    @Test func formatsTheShortestExactSpelling() {
        #expect(DurationSyntax.format(.seconds(86_400)) == "1d")
        #expect(DurationSyntax.format(.seconds(90)) == "90s")
        #expect(DurationSyntax.format(.milliseconds(1500)) == "1500ms")
        #expect(DurationSyntax.format(.seconds(300)) == "5m")
    }

    @Test func rateLimitListsParseAndPrint() {
        #expect(RateLimitRule.parseList("5/1m,30/1h")?.settingText == "5/1m,30/1h")
        #expect(RateLimitRule.parseList("OFF") == [])
        for bad in ["", "5", "5/", "/1m", "0/1m", "5/0s", "5/1m,", "a/1m"] {
            #expect(RateLimitRule.parseList(bad) == nil, "\(bad)")
        }
    }
}
