using Isis.Core.Durability;
using Isis.Core.Node;

namespace Isis;

/// <summary>
/// What a recovery of a group's SafeSend history did: whether it went ahead without members of the
/// group's last view (forced by the operator), which incarnations it gave up, how long the history
/// it rebuilt is, and what may be lost (<see cref="Group.ForceSafeSendRecoveryAsync"/>).
/// </summary>
public sealed class SafeSendRecovery
{
    internal SafeSendRecovery(bool forced, IReadOnlyList<Address> givenUp, long entries, string description)
    {
        Forced = forced;
        GivenUp = givenUp;
        Entries = entries;
        Description = description;
    }

    /// <summary>True if the history was rebuilt without members of the last view (or founded anew because no log came back); false if nobody was given up.</summary>
    public bool Forced { get; }

    /// <summary>The members of the last view the recovery went ahead without: SafeSends only they held are lost.</summary>
    public IReadOnlyList<Address> GivenUp { get; }

    /// <summary>How many SafeSends (and SafeQueries) the history held when this member came to hold it.</summary>
    public long Entries { get; }

    /// <summary>For the operator: what was recovered, from whom, and what may be lost.</summary>
    public string Description { get; }

    /// <inheritdoc/>
    public override string ToString() => Description;
}

// Group: forced recovery of the durable SafeSend history (docs/operations.md, "Forced recovery").
public sealed partial class Group
{
    private TaskCompletionSource<SafeSendRecovery>? _forcedRecovery; // the operator asked, and waits for the outcome
    private SafeSendRecovery? _recoveredWithout;                    // event loop: this member's recovery went ahead without someone

    /// <summary>
    /// Lets this group recover its SafeSend history without the members of its last view that have
    /// not come back, for when one of them never will (its disk is lost). Call it on a member whose
    /// <see cref="Join"/> waits because the group waits for such members (it logs which). The
    /// group then rebuilds the history from the longest log of the members that are back: SafeSends
    /// that only the missing members held are lost, and if one of them comes back its log and
    /// checkpoints are kept aside, never merged. With no log back at all, a new empty history is
    /// founded. The permission is written to this member's log, so it holds across a restart of
    /// this member until the group recovers. The same can be done offline with
    /// <see cref="SafeSendHistory.AllowForcedRecovery"/> (the <c>isis-recover</c> tool), which names the members to give up.
    /// </summary>
    /// <returns>Completes once this member holds the history, with what the recovery did (<see cref="SafeSendRecovery.Forced"/> is false if every member came back after all).</returns>
    /// <exception cref="InvalidOperationException">The group has no disk durability, is not joining, or this member holds the history already.</exception>
    public Task<SafeSendRecovery> ForceSafeSendRecoveryAsync()
    {
        if (_durability != SafeSendDurability.Disk)
        {
            throw new InvalidOperationException($"Group '{Name}' keeps no SafeSend history on disk (SetSafeSendDurability(Disk, directory)): there is nothing to recover.");
        }
        TaskCompletionSource<SafeSendRecovery> done;
        lock (_gate)
        {
            if (_state != GroupState.Joining)
            {
                throw new InvalidOperationException($"Group '{Name}' is {_state.ToString().ToLowerInvariant()}: a forced recovery is for a member whose Join waits for the group to recover its SafeSend history.");
            }
            done = _forcedRecovery ??= new TaskCompletionSource<SafeSendRecovery>(TaskCreationOptions.RunContinuationsAsynchronously);
        }
        var loop = _runtime.RunningLoop();
        loop.Post(() =>
        {
            if (!loop.Node.AllowForcedRecovery(Id, loop.Now))
            {
                done.TrySetException(new InvalidOperationException($"Group '{Name}': this member holds the SafeSend history already (or left), so there is nothing to recover by force."));
            }
        });
        return done.Task;
    }

    /// <summary>Event loop: this member came to hold the history through a recovery that went ahead without members of the last view.</summary>
    internal void OnRecoveredWithout(HistoryRecoveredWithout r)
    {
        // A recovery the rules proved complete gave nobody up and lost nothing: the operator hears
        // which members it went ahead without, as a warning, and a forced recovery asked for
        // meanwhile completes as not forced, with what the recovery did.
        bool forced = r.Reason != HistoryRecovery.ProvedComplete;
        _recoveredWithout = new SafeSendRecovery(forced, forced ? Array.ConvertAll(r.Missing, n => new Address(n)) : [], r.Entries, r.Text);
        _runtime.ReportHistoryProblem(Name, r.Text, error: forced);
    }

    /// <summary>Event loop: this member holds the history; a forced recovery the operator asked for is over.</summary>
    internal void CompleteForcedRecovery(long entries) =>
        _forcedRecovery?.TrySetResult(_recoveredWithout ?? new SafeSendRecovery(false, [], entries,
            $"group '{Name}': every member needed came back; the SafeSend history ({entries} entries) was recovered without giving anyone up"));

    /// <summary>The runtime stopped or the group left before the history was recovered.</summary>
    private void FailForcedRecovery(Exception reason) => _forcedRecovery?.TrySetException(reason);
}
