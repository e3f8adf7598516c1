namespace Isis.Dispatch;

/// <summary>What happened to one delivered message.</summary>
internal enum DispatchOutcome
{
    /// <summary>Every handler whose signature matched ran without throwing.</summary>
    Invoked,

    /// <summary>No handler is registered for the opcode.</summary>
    NoHandlerForOpcode,

    /// <summary>Handlers exist for the opcode but none has the argument types that were sent.</summary>
    SignatureMismatch,

    /// <summary>The payload is structurally invalid, or a value could not be decoded into the handler's type.</summary>
    Malformed,

    /// <summary>A handler threw; later handlers for the same message were not run.</summary>
    HandlerThrew,
}

/// <summary>
/// Outcome of <see cref="HandlerTable.Dispatch(ReadOnlyMemory{byte})"/>. Dispatch reports problems
/// instead of throwing so the delivery loop can count and log them and stay alive.
/// </summary>
internal readonly record struct DispatchResult(DispatchOutcome Outcome, int Opcode, int InvokedCount, string? Message, Exception? Exception)
{
    public bool Succeeded => Outcome == DispatchOutcome.Invoked;

    public static DispatchResult Invoked(int opcode, int count) => new(DispatchOutcome.Invoked, opcode, count, null, null);

    public static DispatchResult NoHandler(int opcode) => new(
        DispatchOutcome.NoHandlerForOpcode, opcode, 0,
        $"opcode {opcode}: no handler is registered; register one with g.Handlers[{opcode}] += ... before members send it",
        null);

    public static DispatchResult Mismatch(int opcode, string message) => new(DispatchOutcome.SignatureMismatch, opcode, 0, message, null);

    public static DispatchResult Malformed(int opcode, string reason) => new(DispatchOutcome.Malformed, opcode, 0, $"opcode {opcode}: malformed message: {reason}", null);

    public static DispatchResult Threw(int opcode, int invokedBefore, string signature, Exception exception) => new(
        DispatchOutcome.HandlerThrew, opcode, invokedBefore,
        $"opcode {opcode}: handler {signature} threw {exception.GetType().Name}: {exception.Message}",
        exception);

    public override string ToString() => Message is null ? $"{Outcome} ({InvokedCount} handlers)" : $"{Outcome}: {Message}";
}
