using System.Runtime.CompilerServices;

namespace Isis.Core.Common;

/// <summary>
/// Protocol invariants, checked in production too (as TigerBeetle does): a broken invariant means
/// the replica can no longer be trusted, so it stops loudly instead of diverging silently. A check
/// costs a comparison: an interpolated rule is formatted only when the check fails.
/// </summary>
internal static class Invariant
{
    public static void Check(bool condition, string rule)
    {
        if (!condition) throw new ProtocolInvariantException(rule);
    }

    public static void Check(bool condition, [InterpolatedStringHandlerArgument(nameof(condition))] ref RuleBuilder rule)
    {
        if (!condition) throw new ProtocolInvariantException(rule.ToStringAndClear());
    }

    /// <summary>Formats a rule's message only when its condition is false (a check that holds allocates nothing).</summary>
    [InterpolatedStringHandler]
    public ref struct RuleBuilder
    {
        private DefaultInterpolatedStringHandler _text;

        public RuleBuilder(int literalLength, int formattedCount, bool condition, out bool shouldAppend)
        {
            shouldAppend = !condition;
            _text = shouldAppend ? new DefaultInterpolatedStringHandler(literalLength, formattedCount) : default;
        }

        public void AppendLiteral(string value) => _text.AppendLiteral(value);

        public void AppendFormatted<T>(T value) => _text.AppendFormatted(value);

        public void AppendFormatted<T>(T value, string? format) => _text.AppendFormatted(value, format);

        public void AppendFormatted(string? value) => _text.AppendFormatted(value);

        internal string ToStringAndClear() => _text.ToStringAndClear();
    }
}

/// <summary>Thrown when a protocol invariant fails: a bug in the core, never a reaction to input.</summary>
internal sealed class ProtocolInvariantException(string rule) : Exception("Protocol invariant violated: " + rule);
