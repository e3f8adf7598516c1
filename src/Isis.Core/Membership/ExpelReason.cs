namespace Isis.Core.Membership;

/// <summary>
/// Why the membership service expelled an incarnation. It travels with the expulsion (in the
/// decision, the firewall's answer and the members' membership updates), so the expelled process
/// and the logs say the real cause, not a guess.
/// </summary>
internal enum ExpelReason : byte
{
    /// <summary>The service stopped hearing the process (missed heartbeats), or the cause is not known where it is told (a notice from before reasons travelled, or a replica restored from a snapshot).</summary>
    Unheard = 0,

    /// <summary>A member's query with QueryTimeoutAction.ExpelSlowMembers timed out waiting for the process's reply.</summary>
    SlowToReply = 1,

    /// <summary>A member found that the process does not hold the group's key.</summary>
    LacksGroupKey = 2,
}

/// <summary>Reading and telling <see cref="ExpelReason"/>s.</summary>
internal static class ExpelReasons
{
    /// <summary>A reason as a packet carries it; anything unknown reads as <see cref="ExpelReason.Unheard"/>.</summary>
    public static ExpelReason Read(long value) => value is > 0 and <= (long)ExpelReason.LacksGroupKey ? (ExpelReason)value : ExpelReason.Unheard;

    /// <summary>The cause in words, for the expelled process's shutdown reason and the logs.</summary>
    public static string Describe(ExpelReason reason) => reason switch
    {
        ExpelReason.SlowToReply => "a member's query timed out waiting for this process's reply (QueryTimeoutAction.ExpelSlowMembers): it was too slow (paused, overloaded, or its handler blocked)",
        ExpelReason.LacksGroupKey => "a member found that this process does not hold the group's key",
        _ => "it stopped hearing this process (crashed, paused or cut off)",
    };
}
