namespace Isis.Serialization;

/// <summary>
/// What a handler parameter accepts: a value whose descriptor equals <see cref="Wire"/>'s, or the
/// null tag when the parameter is a reference type or <see cref="Nullable{T}"/>. Built once per
/// handler at registration so dispatch only compares bytes.
/// </summary>
internal sealed class ParameterShape
{
    private ParameterShape(Type parameterType, WireType wire, bool acceptsNull)
    {
        ParameterType = parameterType;
        Wire = wire;
        AcceptsNull = acceptsNull;
    }

    public Type ParameterType { get; }

    /// <summary>Wire type of a non-null argument; for int? this is int, because a boxed int? is an int.</summary>
    public WireType Wire { get; }

    public bool AcceptsNull { get; }

    public string DisplayName => WireType.Display(ParameterType);

    public static bool TryCreate(Type parameterType, out ParameterShape? shape, out string? error)
    {
        ArgumentNullException.ThrowIfNull(parameterType);
        var underlying = Nullable.GetUnderlyingType(parameterType);
        if (!WireType.TryFor(underlying ?? parameterType, out var wire, out error))
        {
            shape = null;
            return false;
        }
        shape = new ParameterShape(parameterType, wire!, acceptsNull: underlying is not null || !parameterType.IsValueType);
        return true;
    }
}
