using System.Diagnostics;

namespace Isis.Collections;

// OperationLog, part 3 of 3: how stale this member's reads may be. A member cannot see that it is stale
// from its own history (a replica starved as a whole merges nothing and hears nothing), but each
// gossip exchange tells it what a peer held: once its history reaches the length a peer reported,
// it held everything that peer had merged when the pull left. The time since the latest such
// moment bounds how old its reads are, and grows without limit while it is cut off or starved.
internal sealed partial class OperationLog<TOp>
{
    private long _currentAsOf = Stopwatch.GetTimestamp(); // when this member last held everything a peer had merged
    private readonly List<(long Length, long AskedAt)> _catchUpTargets = new(); // peers' lengths this member has yet to reach, in the order heard
    private bool _alone; // the only member of its view: nobody holds more

    /// <summary>
    /// How old this member's reads may be: the time since its history last held everything a peer
    /// had merged (zero while it is the group's only member). It stays near the gossip interval
    /// while the member keeps up, and grows while it is cut off, starved, or its peers do not answer.
    /// </summary>
    public TimeSpan Staleness
    {
        get
        {
            lock (_gate) return _alone ? TimeSpan.Zero : Stopwatch.GetElapsedTime(_currentAsOf);
        }
    }

    /// <summary>A view was installed (under <see cref="_gate"/>): the first one, a join, makes the member current (its state is the group's at the view).</summary>
    private void StalenessOnView(View view, bool first)
    {
        _alone = view.Members.Length == 1;
        if (first || _alone)
        {
            _currentAsOf = Stopwatch.GetTimestamp();
            _catchUpTargets.Clear();
        }
    }

    /// <summary>A peer held <paramref name="length"/> entries when the pull sent at <paramref name="askedAt"/> reached it (under <see cref="_gate"/>).</summary>
    private void PeerHeld(long length, long askedAt)
    {
        // Bounded: past 64 (a member far behind, one a gossip round), the oldest goes; a later one reached makes it current later, never wrongly.
        if (_catchUpTargets.Count == MaxCatchUpTargets) _catchUpTargets.RemoveAt(0);
        _catchUpTargets.Add((length, askedAt));
        CaughtUp();
    }

    private const int MaxCatchUpTargets = 64;

    /// <summary>The history grew, or a target came (under <see cref="_gate"/>): the targets it reached make the member current as of when they were asked.</summary>
    private void CaughtUp()
    {
        if (_catchUpTargets.Count == 0) return;
        long length = _log.History.Length;
        for (int i = _catchUpTargets.Count - 1; i >= 0; i--)
        {
            if (_catchUpTargets[i].Length > length) continue;
            _currentAsOf = Math.Max(_currentAsOf, _catchUpTargets[i].AskedAt);
            _catchUpTargets.RemoveAt(i);
        }
    }
}
