namespace Isis.Collections;

/// <summary>
/// The update a <c>WaitForAsync</c> waited for will never be in the collection's history: its issuer
/// left the group (it failed, or called Leave) before the group ordered the update, and no member
/// that stays received it. A Send of a process that fails can be lost the same way. Issue the update
/// again from a member, if it still matters.
/// </summary>
public sealed class UpdateLostException : IsisException
{
    /// <summary>Creates the exception for update <paramref name="id"/>, with a message that says what happened.</summary>
    /// <param name="id">The lost update.</param>
    /// <param name="message">What happened, and what to do.</param>
    public UpdateLostException(OperationId id, string message) : base(message)
    {
        Id = id;
    }

    /// <summary>The lost update.</summary>
    public OperationId Id { get; }
}
