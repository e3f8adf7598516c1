using System.Text;

namespace Isis.Simulation.Checking;

/// <summary>One broken guarantee. <see cref="Property"/> is the name of the checker method that found it.</summary>
internal sealed record Violation(string Property, string Description)
{
    public override string ToString() => $"{Property}: {Description}";
}

/// <summary>What <see cref="HistoryChecker.Check"/> found.</summary>
internal sealed class CheckResult
{
    public CheckResult(IReadOnlyList<Violation> violations, int eventCount)
    {
        Violations = violations;
        EventCount = eventCount;
    }

    public bool Passed => Violations.Count == 0;

    /// <summary>At most a capped number per property, plus one "... more" line per capped property.</summary>
    public IReadOnlyList<Violation> Violations { get; }

    public int EventCount { get; }

    public bool Violates(string property)
    {
        foreach (Violation v in Violations)
        {
            if (v.Property == property) return true;
        }
        return false;
    }

    /// <summary>A multi-line report suitable for a test failure message.</summary>
    public override string ToString()
    {
        if (Passed) return $"history of {EventCount} events passed every check";
        var sb = new StringBuilder();
        sb.Append("history of ").Append(EventCount).Append(" events violates:");
        foreach (Violation v in Violations) sb.Append("\n  ").Append(v);
        return sb.ToString();
    }
}

/// <summary>
/// Collects violations, keeping at most a fixed number per property: a broken protocol can produce
/// millions of them and the first few are what a human reads.
/// </summary>
internal sealed class ViolationSink
{
    private readonly List<Violation> _violations = [];
    private readonly Dictionary<string, int> _counts = [];
    private readonly int _maxPerProperty;

    public ViolationSink(int maxPerProperty = 20)
    {
        ArgumentOutOfRangeException.ThrowIfLessThan(maxPerProperty, 1);
        _maxPerProperty = maxPerProperty;
    }

    /// <summary>True if a violation of <paramref name="property"/> would still be listed (skip building its text otherwise).</summary>
    public bool Wants(string property) => !_counts.TryGetValue(property, out int n) || n < _maxPerProperty;

    public void Report(string property, string description)
    {
        _counts.TryGetValue(property, out int n);
        _counts[property] = n + 1;
        if (n < _maxPerProperty) _violations.Add(new Violation(property, description));
    }

    public CheckResult ToResult(int eventCount)
    {
        var all = new List<Violation>(_violations);
        foreach ((string property, int n) in _counts)
        {
            if (n > _maxPerProperty)
            {
                all.Add(new Violation(property, $"... and {n - _maxPerProperty} more {property} violations not listed ({n} in all)"));
            }
        }
        return new CheckResult(all, eventCount);
    }
}
