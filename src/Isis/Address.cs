using Isis.Core.Identity;

namespace Isis;

/// <summary>
/// Identifies one process incarnation: where it listens and which incarnation it is. A process
/// that restarts on the same port is a different <see cref="Address"/>.
/// </summary>
public sealed class Address : IEquatable<Address>
{
    internal Address(NodeId node) => Node = node;

    internal NodeId Node { get; }

    /// <summary>The IPv4 endpoint this process receives on, as "a.b.c.d:port".</summary>
    public string Endpoint => EndpointCodec.Format(Node.Endpoint);

    /// <summary>The incarnation number: it changes every time a process starts.</summary>
    public uint Incarnation => Node.Incarnation;

    /// <inheritdoc />
    public bool Equals(Address? other) => other is not null && other.Node == Node;

    /// <inheritdoc />
    public override bool Equals(object? obj) => Equals(obj as Address);

    /// <inheritdoc />
    public override int GetHashCode() => Node.GetHashCode();

    /// <summary>"endpoint#incarnation".</summary>
    public override string ToString() => Node.ToString();

    /// <summary>Compares by identity.</summary>
    public static bool operator ==(Address? a, Address? b) => a is null ? b is null : a.Equals(b);

    /// <summary>Compares by identity.</summary>
    public static bool operator !=(Address? a, Address? b) => !(a == b);
}
