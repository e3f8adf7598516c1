namespace Isis.Serialization;

/// <summary>
/// The wire types of the argument types one thread has sent, described once and then looked up:
/// a Send of an enum, array, list or record then allocates nothing for its type's description
/// (scalars never did). One per thread, like the <see cref="PooledBufferWriter"/> beside it; an
/// application sends a closed set of types, so the cache stays small.
/// </summary>
internal sealed class WireTypeCache
{
    private readonly Dictionary<Type, WireType> _known = [];

    public bool TryGet(Type type, out WireType? wire, out string? error)
    {
        // Scalars are shared already, and a type code switch is cheaper than a dictionary lookup.
        wire = WireType.Primitive(type);
        if (wire is not null || _known.TryGetValue(type, out wire))
        {
            error = null;
            return true;
        }
        if (!WireType.TryFor(type, out wire, out error))
            return false;
        _known[type] = wire!;
        return true;
    }
}
