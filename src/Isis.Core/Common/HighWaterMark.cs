namespace Isis.Core.Common;

/// <summary>
/// The largest of the last <c>window</c> values noted (1 before any): how much of a resource to
/// keep for reuse, so that a store keeps what its recent peaks needed and gives back what a burst
/// took once the burst has passed (the SafeSend log's spare segments, the history's payload slabs).
/// </summary>
internal sealed class HighWaterMark(int window)
{
    private readonly Queue<int> _recent = new();

    /// <summary>Notes <paramref name="value"/>, forgetting the oldest past the window.</summary>
    public void Note(int value)
    {
        _recent.Enqueue(value);
        if (_recent.Count > window) _recent.Dequeue();
    }

    /// <summary>The largest value noted over the window, 1 before any.</summary>
    public int Value => _recent.Count == 0 ? 1 : _recent.Max();
}
