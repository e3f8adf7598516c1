using Microsoft.Extensions.Logging;

namespace Isis.Perpetual.Runtime;

/// <summary>Every log line of the Perpetual package, with stable event ids (100 and up: the runtime's are below).</summary>
internal static partial class PerpetualLog
{
    [LoggerMessage(EventId = 100, Level = LogLevel.Warning, Message = "Perpetual {Replica}: replica {PeerReplica} of {Peer} sent {What} for call {Number} that differs from what f+1 of its replicas agreed on: it is faulty or its application is not deterministic")]
    public static partial void Divergence(ILogger logger, string replica, int peerReplica, string peer, string what, long number);

    [LoggerMessage(EventId = 101, Level = LogLevel.Error, Message = "Perpetual {Replica}: the loop resumed from outside the agreed order ({Count} times so far: it awaited a timer, I/O or a task of another thread); this replica may now diverge from the others. Await only the replica's own operations")]
    public static partial void ForeignResumption(ILogger logger, string replica, long count);

    [LoggerMessage(EventId = 102, Level = LogLevel.Error, Message = "Perpetual {Replica}: the application loop ended ({Outcome}); this replica still takes part in agreement but executes nothing more")]
    public static partial void LoopEnded(ILogger logger, Exception? exception, string replica, string outcome);

    [LoggerMessage(EventId = 103, Level = LogLevel.Critical, Message = "Perpetual {Replica}: the protocol stopped on a broken invariant: {Reason}")]
    public static partial void Stopped(ILogger logger, string replica, string reason);

    [LoggerMessage(EventId = 104, Level = LogLevel.Error, Message = "Perpetual {Replica}: {Problem}")]
    public static partial void Problem(ILogger logger, string replica, string problem);

    [LoggerMessage(EventId = 105, Level = LogLevel.Warning, Message = "Perpetual client {Client}: a replica of {Service} answered request {Number} differently from the f+1 that agreed ({Divergent} such replies so far): it is faulty or its application is not deterministic")]
    public static partial void ClientDivergence(ILogger logger, string client, string service, long number, long divergent);
}
