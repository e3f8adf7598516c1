using System.Globalization;

namespace Isis.Collections;

/// <summary>
/// How far a replica's copy of one replicated collection had got when it answered: the collection
/// (its group's name) and its history length then. A position names one state everywhere (every
/// member's history is a prefix of one sequence), so a client that saw position 120 of a collection
/// knows that an answer made at 100 is older than what it has seen: the Tempest papers' session
/// guarantee. A service sends the positions of the collections an answer read in the
/// <see cref="HeaderName"/> header; <see cref="RedundantQueryClient"/> reads them.
/// </summary>
/// <param name="Collection">The collection's group name.</param>
/// <param name="Length">Its history length (<c>MergedCount</c>) when the answer was made.</param>
public readonly record struct HistoryPosition(string Collection, long Length)
{
    /// <summary>The HTTP header that carries an answer's positions: <c>name=length</c> pairs separated by commas, names URI-escaped.</summary>
    public const string HeaderName = "Isis-History-Position";

    /// <summary>The pair as the header carries it: <c>name=length</c>.</summary>
    public override string ToString() => $"{Uri.EscapeDataString(Collection)}={Length.ToString(CultureInfo.InvariantCulture)}";

    /// <summary>
    /// The header value for an answer that read <paramref name="positions"/>. Take each position
    /// before reading its collection: the answer is then at least as fresh as it claims.
    /// </summary>
    /// <param name="positions">The positions of the collections the answer read.</param>
    public static string Format(params IEnumerable<HistoryPosition> positions) => string.Join(", ", positions);

    /// <summary>Reads a header value that <see cref="Format"/> made; false (and no positions) for anything else.</summary>
    /// <param name="header">The header's value.</param>
    /// <param name="positions">The positions it carries.</param>
    public static bool TryParse(string? header, out HistoryPosition[] positions)
    {
        positions = [];
        if (string.IsNullOrWhiteSpace(header)) return false;
        var parsed = new List<HistoryPosition>();
        foreach (string item in header.Split(',', StringSplitOptions.TrimEntries | StringSplitOptions.RemoveEmptyEntries))
        {
            int equals = item.LastIndexOf('=');
            if (equals <= 0 || !long.TryParse(item.AsSpan(equals + 1), NumberStyles.None, CultureInfo.InvariantCulture, out long length)) return false;
            parsed.Add(new HistoryPosition(Uri.UnescapeDataString(item[..equals]), length));
        }
        positions = [.. parsed];
        return positions.Length > 0;
    }
}
