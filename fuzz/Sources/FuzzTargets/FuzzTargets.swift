import Foundation
import Ingest

// libFuzzer entry point; FUZZ_TARGET picks the parser (see FuzzEntryPoints.names).
private let target = ProcessInfo.processInfo.environment["FUZZ_TARGET"] ?? "json"

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    FuzzEntryPoints.run(target, Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}

/// SwiftPM links an executable's entry point as `<Target>_main` (so tests could import it); hand that to
/// libFuzzer's driver, which then calls `LLVMFuzzerTestOneInput`. Named as libFuzzer names it, hence the exception:
// swift-format-ignore: AlwaysUseLowerCamelCase
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<CInt>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ callback: @convention(c) (UnsafePointer<UInt8>, Int) -> CInt
) -> CInt

@_cdecl("FuzzTargets_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var count = argc
    var arguments = argv
    return LLVMFuzzerRunDriver(&count, &arguments) { data, size in fuzzOneInput(data, size) }
}
