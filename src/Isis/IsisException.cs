namespace Isis;

/// <summary>
/// A call the runtime cannot carry out: misuse of the API, or a process that the membership
/// service shut down. The message says what happened and what to do.
/// </summary>
public class IsisException : Exception
{
    /// <summary>Creates an exception with a message saying what happened and what to do.</summary>
    public IsisException(string message) : base(message)
    {
    }

    /// <summary>Creates an exception with a message and the exception that caused it.</summary>
    public IsisException(string message, Exception innerException) : base(message, innerException)
    {
    }
}

/// <summary>
/// The process was expelled by the membership service or lost contact with it; every group is
/// wedged. Restart the process to rejoin as a new member.
/// </summary>
public sealed class IsisShutdownException : IsisException
{
    /// <summary>Creates the exception with the shutdown reason.</summary>
    public IsisShutdownException(string reason) : base(reason)
    {
    }
}

/// <summary>All exceptions the runtime throws are built here, so their messages stay consistent.</summary>
internal static class ExceptionFactory
{
    public static IsisException NotStarted() =>
        new("The Isis runtime is not running. Call IsisSystem.Start() (or IsisRuntime.Start()) before using groups.");

    public static IsisShutdownException ShutDown(string reason) =>
        new($"The Isis runtime has shut down: {reason}");

    public static IsisException NotJoined(string group, string operation) =>
        new($"{operation} on group '{group}' needs a joined group: call Join() first (and do not use the group after Leave()).");

    public static IsisException GroupTerminated(string group, string operation) =>
        new($"{operation} on group '{group}': the group was deleted (a member called Terminate()). Create a new Group(\"{group}\") and join it to start the group again.");

    public static IsisException AlreadyJoined(string group) =>
        new($"Group '{group}' is already joined (or joining) in this runtime. Use the existing Group object; one process joins a group once.");

    public static IsisException RejoinAfterLeave(string group) =>
        new($"This Group object for '{group}' has left the group. Create a new Group(\"{group}\") to join again (it will be a new member).");

    public static IsisException DuplicateGroup(string group) =>
        new($"A Group object named '{group}' already exists in this runtime; use that object instead of creating another.");

    public static InvalidOperationException BlockingInHandler(string group, string operation) =>
        new($"{operation} would wait for group '{group}''s delivery thread, which is running this handler: it would deadlock. " +
            $"Use the async form (for example {operation}Async) and do not wait on it inside the handler, or call it from another thread.");

    public static IsisException ThresholdAboveGroupSize(string group, int phi, int members) =>
        new($"The SafeSend threshold of group '{group}' is {phi} acceptors but the view has only {members} members, so no SafeSend could ever be delivered. " +
            "Lower it with SetSafeSendThreshold, or wait until enough members have joined.");

    public static IsisException SafeSendLogFull(string group, string path, long length, int payload, long bound) =>
        new($"The SafeSend log of group '{group}' ({path}) holds {length:N0} bytes; a {payload:N0}-byte SafeSend would take it past its bound of {bound:N0} bytes, " +
            "so it was not sent. The log keeps the group's whole history, replayed after a restart: raise the bound with SetSafeSendDurability(..., maxLogBytes) " +
            "at every member (the history is held in memory too), or keep this data in a new group.");

    public static IsisException MessageTooLarge(int size, int limit) =>
        new($"The message is {size} bytes, above the limit of {limit} bytes. Send less data per message or raise IsisOptions.MaxMessageSize.");
}
