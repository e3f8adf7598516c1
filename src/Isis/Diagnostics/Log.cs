using Microsoft.Extensions.Logging;

namespace Isis.Diagnostics;

/// <summary>Every log line the runtime writes, with stable event ids.</summary>
internal static partial class Log
{
    [LoggerMessage(EventId = 1, Level = LogLevel.Information, Message = "Isis runtime started at {Address}; membership service {Service}")]
    public static partial void Started(ILogger logger, string address, string service);

    [LoggerMessage(EventId = 2, Level = LogLevel.Information, Message = "Group {Group}: installed {View}")]
    public static partial void ViewInstalled(ILogger logger, string group, string view);

    [LoggerMessage(EventId = 3, Level = LogLevel.Warning, Message = "Group {Group}: message from {Sender} not delivered to the application: {Reason}")]
    public static partial void HandlerMismatch(ILogger logger, string group, string sender, string reason);

    [LoggerMessage(EventId = 4, Level = LogLevel.Error, Message = "Group {Group}: a handler threw; {Action}")]
    public static partial void HandlerThrew(ILogger logger, Exception exception, string group, string action);

    [LoggerMessage(EventId = 5, Level = LogLevel.Critical, Message = "Isis runtime shut down by the membership protocol: {Reason}")]
    public static partial void ShutDown(ILogger logger, string reason);

    [LoggerMessage(EventId = 6, Level = LogLevel.Warning, Message = "Membership service expelled {Member} ({Reason}); its traffic is now firewalled")]
    public static partial void Expelled(ILogger logger, string member, string reason);

    [LoggerMessage(EventId = 24, Level = LogLevel.Warning, Message = "Group {Group}: query {Query} got no reply from {Members} within its timeout; reported them to the membership service to be expelled (QueryTimeoutAction.ExpelSlowMembers)")]
    public static partial void SlowRepliersReported(ILogger logger, string group, long query, string members);

    [LoggerMessage(EventId = 8, Level = LogLevel.Warning, Message = "Firewall: dropped traffic from expelled incarnation {Incarnation} ({Dropped} packets from expelled incarnations dropped so far)")]
    public static partial void Firewalled(ILogger logger, string incarnation, long dropped);

    [LoggerMessage(EventId = 9, Level = LogLevel.Error, Message = "Group '{Group}': {Problem}")]
    public static partial void HistoryError(ILogger logger, string group, string problem);

    [LoggerMessage(EventId = 10, Level = LogLevel.Warning, Message = "Group '{Group}': {Situation}")]
    public static partial void HistoryWarning(ILogger logger, string group, string situation);

    [LoggerMessage(EventId = 12, Level = LogLevel.Information, Message = "Process {Member} exited after handing over and leaving its groups; the membership service removed it")]
    public static partial void Exited(ILogger logger, string member);

    [LoggerMessage(EventId = 11, Level = LogLevel.Warning, Message = "Isis runtime: {Problem}")]
    public static partial void RuntimeProblem(ILogger logger, string problem);

    [LoggerMessage(EventId = 23, Level = LogLevel.Error, Message = "Isis runtime: {Problem}")]
    public static partial void RuntimeError(ILogger logger, string problem);

    [LoggerMessage(EventId = 13, Level = LogLevel.Warning, Message = "{HeldBack} more reports of {What} were not logged since the last one")]
    public static partial void HeldBack(ILogger logger, long heldBack, string what);

    [LoggerMessage(EventId = 14, Level = LogLevel.Warning, Message = "Dropped {Dropped} malformed, truncated, forged, replayed, unauthenticated or oversized packets ({Total} since start); hostile input or a misconfigured peer (another key?) sends to {Address}")]
    public static partial void HostileInputDropped(ILogger logger, long dropped, long total, string address);

    [LoggerMessage(EventId = 15, Level = LogLevel.Information, Message = "Group {Group}: the checkpoint this member was receiving is dropped ({Reason})")]
    public static partial void StateTransferRestarted(ILogger logger, string group, string reason);

    [LoggerMessage(EventId = 16, Level = LogLevel.Error, Message = "Group {Group}: a checkpoint part matched no LoadChkpt handler ({Reason}); register a handler whose parameters match what the MakeChkpt handlers send")]
    public static partial void CheckpointPartUnmatched(ILogger logger, string group, string reason);

    [LoggerMessage(EventId = 17, Level = LogLevel.Error, Message = "Group {Group}: {Reason}")]
    public static partial void GroupKeyRejected(ILogger logger, string group, string reason);

    [LoggerMessage(EventId = 18, Level = LogLevel.Information, Message = "Group {Group}: checkpoint saved to {Path} ({Parts} parts, {Bytes} bytes)")]
    public static partial void CheckpointSaved(ILogger logger, string group, string path, long parts, long bytes);

    [LoggerMessage(EventId = 19, Level = LogLevel.Information, Message = "Group {Group}: state restored from checkpoint {Checkpoint}")]
    public static partial void CheckpointRestored(ILogger logger, string group, string checkpoint);

    [LoggerMessage(EventId = 20, Level = LogLevel.Information, Message = "Group {Group}: the group moved to key {Fingerprint} at view {ViewId}")]
    public static partial void GroupKeyRotated(ILogger logger, string group, string fingerprint, int viewId);

    [LoggerMessage(EventId = 21, Level = LogLevel.Warning, Message = "No membership service answered within {Waited} ms at any of the {Addresses} addresses asked (the well-known port, the seeds and the replicas on file); still asking for up to {DiscoveryTimeout} ms in all (IsisOptions.DiscoveryTimeout): start the first process, or the first seed's machine.{More}")]
    public static partial void ServiceNotFoundYet(ILogger logger, long waited, int addresses, long discoveryTimeout, string more);

    [LoggerMessage(EventId = 22, Level = LogLevel.Warning, Message = "Founded the embedded membership service at {Replica}: this process holds the well-known port and no service answered for {Waited} ms, and no replica on the machine's file runs (the earlier service stopped, or every process restarted)")]
    public static partial void FoundedLater(ILogger logger, string replica, long waited);

    [LoggerMessage(EventId = 7, Level = LogLevel.Information, Message = "Isis runtime at {Address} stopped")]
    public static partial void Stopped(ILogger logger, string address);

    [LoggerMessage(EventId = 25, Level = LogLevel.Information, Message = "Client of group {Group}: request {Number} moves from relay {From} to {To} (no answer within the failover time, or it refused)")]
    public static partial void ClientFailedOver(ILogger logger, string group, long number, string from, string to);

    [LoggerMessage(EventId = 26, Level = LogLevel.Error, Message = "Client of group {Group} stopped: {Reason}")]
    public static partial void ClientStopped(ILogger logger, string group, string reason);
}
