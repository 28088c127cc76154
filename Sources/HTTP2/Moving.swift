/// An array's elements in order, each moved out as it is handed out. Iterating an array copies each element (a
/// reference count for each reference it holds) and releases them all again with the array; the event loop's
/// requests pass through several arrays, and those copies were a good part of its reference counting (callgrind,
/// thirty-first session).
struct Moving<Element>: Sequence, IteratorProtocol {
    /// The elements last first, so that each is taken from the end (`popLast` moves it out).
    private var reversed: [Element]

    init(_ elements: consuming [Element]) {
        // Reversing only moves elements.
        elements.reverse()
        reversed = elements
    }

    mutating func next() -> Element? { reversed.popLast() }
}
